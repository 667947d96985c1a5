"""ckpt.statefile"""
