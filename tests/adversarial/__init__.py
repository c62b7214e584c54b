"""Red-team suite: cheating plugins and forged bundles, each neutralised or refused."""
