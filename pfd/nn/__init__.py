"""pfd.nn"""
