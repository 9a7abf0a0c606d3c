"""Replay: storage, the rate limiter, prioritized sampling, frame-efficient images and HER."""
