"""What a recipe deploys as besides the bare launch: the compose services
(`compose`), Kubernetes manifests (`k8s`; `render_k8s` is `sm12x render` and
its --k8s form), the sglang-router in front of several rigs (`router`), and
the exposure check compose runs before any server (`exposure`)."""
