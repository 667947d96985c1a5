"""ckpt.state"""
