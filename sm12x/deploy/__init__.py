"""What a recipe deploys as besides the bare launch: the compose services
(`compose`), Kubernetes manifests (`k8s`), the sglang-router in front of
several rigs (`router`), and the exposure check compose runs before any server
(`exposure`)."""
