"""Prompt runs: rollouts, their engine and data, the policy-gradient losses, the critic-free frame (RLOO, online DPO),
checkpoints and profiles. (docs/architecture.md: training/ in rooms)"""
