"""An unmodified script: it names no device and never imports kiln.

It trains on whatever torch.accelerator offers, and on the CPU when there is
no accelerator. The test runs it with and without backend autoload.
"""

import torch

device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
x = torch.randn(64, 16).to(device)
y = x.sum(dim=1, keepdim=True).sin()
for _ in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
print("device:", next(model.parameters()).device.type)
print("loss:", f"{loss.item():.6f}")
if device.type != "cpu":
    print("memory_allocated:", torch.accelerator.memory_allocated())
    print("max_memory_allocated:", torch.accelerator.max_memory_allocated())
    print("device_count:", torch.accelerator.device_count())
