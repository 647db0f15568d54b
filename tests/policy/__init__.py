"""Custom checkov checks for sm12x's Kubernetes manifests (sm12x_checks.py)."""
