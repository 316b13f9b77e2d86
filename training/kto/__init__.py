"""KTO (Ethayarajh et al. 2024): a policy from unpaired thumbs up and down, against a frozen reference."""
