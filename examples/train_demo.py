"""A plain PyTorch training script: nothing here knows about kiln.

It trains a small classifier on synthetic data on the current accelerator
(torch.accelerator), which kiln's autoload makes the `neuron` device. Run it
with KILN_METRICS=1 (as `make demo` does) to see what kiln did.
"""

import time

import torch
import torch.nn as nn

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
print(f"training on: {device} ({getattr(torch, device.type).get_device_name() if device.type != 'cpu' else 'cpu'})")

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(1, 8, 3, padding=1),
    nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(4),
    nn.Flatten(),
    nn.Linear(16 * 16, 64),
    nn.GELU(),
    nn.LayerNorm(64),
    nn.Linear(64, 10),
).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

# Synthetic "digits": each class is a noisy fixed pattern.
patterns = torch.randn(10, 1, 16, 16)
labels = torch.randint(0, 10, (512,))
images = patterns[labels] + 0.5 * torch.randn(512, 1, 16, 16)

start = time.time()
for epoch in range(3):
    for i in range(0, 512, 64):
        x = images[i : i + 64].to(device)
        y = labels[i : i + 64].to(device)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = (model(images.to(device)).argmax(1).cpu() == labels).float().mean().item()
    print(f"epoch {epoch}: loss {loss.item():.4f}  accuracy {accuracy:.3f}")
print(f"trained in {time.time() - start:.2f} s")
if device.type != "cpu":
    print(
        f"device memory: {torch.accelerator.memory_allocated() / 2**20:.1f} MiB allocated, "
        f"{torch.accelerator.max_memory_allocated() / 2**20:.1f} MiB peak"
    )
