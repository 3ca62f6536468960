"""Named model configs (TOML), the package ``saliency_kit.pretrained_configs``; see saliency_kit.zoo."""
