"""ckpt.cgroups"""
