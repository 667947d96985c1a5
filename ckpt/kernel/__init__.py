"""ckpt.kernel"""
