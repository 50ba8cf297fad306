"""Training on the device gives CPU's losses and gradients (50 AdamW steps)."""

import copy

import pytest
import torch

from conftest import DEVICE

STEPS = 50
RTOL = 1e-5


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(20, 64),
        torch.nn.GELU(),
        torch.nn.LayerNorm(64),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 5),
    )


def cnn():
    # No bias before BatchNorm (as in practice): its true gradient is zero, so
    # AdamW would turn rounding noise into full-size steps and compare noise.
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(16, 5),
    )


def train(model, inputs, targets, device):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
    losses, grads = [], []
    for step in range(STEPS):
        x = inputs[step % len(inputs)].to(device)
        y = targets[step % len(targets)].to(device)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        grads.append([p.grad.detach().cpu().clone() for p in model.parameters()])
        opt.step()
        losses.append(loss.item())
    return losses, grads, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("make,shape", [(mlp, (16, 20)), (cnn, (8, 3, 12, 12))], ids=["mlp", "cnn"])
def test_training_matches_cpu(make, shape):
    torch.manual_seed(0)
    model = make()
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(shape, generator=g) for _ in range(5)]
    targets = [torch.randint(0, 5, (shape[0],), generator=g) for _ in range(5)]
    cpu_losses, cpu_grads, cpu_params = train(copy.deepcopy(model), inputs, targets, "cpu")
    dev_losses, dev_grads, dev_params = train(copy.deepcopy(model), inputs, targets, DEVICE)
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=RTOL, atol=0)
    for step, (dg, cg) in enumerate(zip(dev_grads, cpu_grads)):
        for d, c in zip(dg, cg):
            torch.testing.assert_close(d, c, rtol=RTOL, atol=1e-7, msg=f"gradient differs at step {step}")
    for d, c in zip(dev_params, cpu_params):
        torch.testing.assert_close(d, c, rtol=RTOL, atol=1e-7)
    assert cpu_losses[-1] < cpu_losses[0]  # it did train
