"""pfd.distill"""
