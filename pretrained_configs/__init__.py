"""Named model configs (TOML), installed as ``saliency_kit.pretrained_configs``; see saliency_kit.zoo."""
