"""Direct preference optimisation (Rafailov et al. 2023) from the store's pairs: the policy is trained on the
chosen/rejected pairs directly, against a frozen reference, with no reward model and no sampling."""
