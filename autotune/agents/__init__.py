"""Learning agents that propose configurations (stable-baselines3 / sb3-contrib)."""
