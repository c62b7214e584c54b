"""Plain text for what the papers print in LaTeX, and readable labels for column keys."""

from __future__ import annotations

import re

TEX_SYMBOLS = {r"\times": "×", r"\pm": "±", r"\leq": "≤", r"\geq": "≥", r"\rho": "ρ"}
COLUMN_LABELS = {
    "full_ft_mean": "Full-FT (%)",
    "lora_mean": "LoRA (%)",
    "diff": "Diff (%)",
    "p": "p-value",
    "d": "Cohen's d",
    "average": "Average",
}
"""Keys of the transcribed tables shown under the paper's own headers."""
SHOT_COLUMN = re.compile(r"bscd-([a-z]+)/(\d+)shot")
BSCD_NAMES = {
    "chestx": "ChestX",
    "isic": "ISIC",
    "eurosat": "EuroSAT",
    "cropdisease": "CropDisease",
}


def plain_tex(text: str) -> str:
    r"""``$d$`` -> ``d``, ``$9\times 10^{-7}$`` -> ``9 × 10^-7``: inline math as plain text."""

    def math(match: re.Match[str]) -> str:
        body = match.group(1)
        for command, symbol in TEX_SYMBOLS.items():
            body = body.replace(command, f" {symbol} ")
        body = re.sub(r"\^\{([^}]*)\}", r"^\1", body)
        return re.sub(r"\s+", " ", body.replace("{", "").replace("}", "")).strip()

    return re.sub(r"\$([^$]+)\$", math, text)


def column_label(key: str) -> str:
    """The paper's header for a transcribed table's column key."""
    shots = SHOT_COLUMN.fullmatch(key)
    if shots:
        name = BSCD_NAMES.get(shots.group(1), shots.group(1))
        return f"{name} {shots.group(2)}-shot"
    return COLUMN_LABELS.get(key, key)
