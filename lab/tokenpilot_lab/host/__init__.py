"""What the dev cluster and the pod runner both stand on: process supervision, kubeconfig files
and the lab's errors. Imports nothing of either (.importlinter)."""
