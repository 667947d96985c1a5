"""ckpt.sandbox"""
