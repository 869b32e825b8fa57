"""The Ray Serve application of lmplatform (`serve run serve/config.yaml`); the code lives in lmplatform.serving."""
