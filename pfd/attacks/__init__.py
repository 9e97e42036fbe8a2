"""pfd.attacks"""
