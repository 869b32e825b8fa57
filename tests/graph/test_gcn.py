import math

import torch

from lmplatform.graph.gcn import GCNLayer, edge_adjacency, normalized_adjacency, pair_adjacency


def test_normalized_adjacency_of_a_three_node_path_matches_the_hand_computation() -> None:
    # 0 - 1 - 2: A + I has degrees 2, 3, 2, so Â_ij = (A + I)_ij / sqrt(d_i d_j)
    a_hat = normalized_adjacency(edge_adjacency(3, [(0, 1), (1, 2)]))
    s6 = 1 / math.sqrt(6)
    expected = torch.tensor([[1 / 2, s6, 0.0], [s6, 1 / 3, s6], [0.0, s6, 1 / 2]])
    assert torch.allclose(a_hat, expected, atol=1e-6)


def test_edges_are_undirected_and_batched_normalisation_matches_single() -> None:
    adjacency = edge_adjacency(3, [(2, 0)])
    assert adjacency[0, 2] == adjacency[2, 0] == 1 and adjacency.trace() == 0
    batch = torch.stack([adjacency, edge_adjacency(3, [(0, 1)])])
    assert torch.allclose(normalized_adjacency(batch)[0], normalized_adjacency(adjacency))


def test_cldr_pair_adjacency_and_gcn_layer() -> None:
    assert torch.allclose(pair_adjacency(0.8), torch.tensor([[0.8, 0.2], [0.2, 0.8]]))
    layer = GCNLayer(2, 2, activation=torch.relu, bias=False)
    with torch.no_grad():
        layer.linear.weight.copy_(torch.eye(2))
    x = torch.tensor([[1.0, -1.0], [0.0, 2.0]])
    out = layer(pair_adjacency(0.8), x)
    # σ(Â X W) with W = I: row 0 = relu(0.8*[1,-1] + 0.2*[0,2]) = relu([0.8, -0.4])
    assert torch.allclose(out, torch.tensor([[0.8, 0.0], [0.2, 1.4]]), atol=1e-6)
