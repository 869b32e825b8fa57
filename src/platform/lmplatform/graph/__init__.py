"""Graph contrastive learning on entity-relation graphs (ADE-style data): data, GCN, negatives, evaluation."""
