"""ckpt.bench"""
