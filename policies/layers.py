"""The layers every model is built of: the MLP, the Nature CNN, the encoder of a Box observation (one or the other),
and the orthogonal initialisation of the actor-critics. The composite models (``policies.models``) and the keys'
encoders of a dictionary observation (``policies.encoders``, ``policies.key_encoders``) build on them, so that
neither needs the other to have its parts."""
from __future__ import annotations

from typing import Callable, Sequence, Tuple

import torch
from torch import nn

__all__ = ["mlp", "encoder", "NatureCNN", "Linear", "OutputLinear"]


class NatureCNN(nn.Module):
    """The convolutional torso of Mnih et al. (2015): 32x8x8/4, 64x4x4/2, 64x3x3/1, ReLU, flattened.

    Takes uint8 frames ``[B, C, 84, 84]`` (scaled to [0, 1] here) and returns ``[B, out_dim]``.
    """

    def __init__(self, in_channels: int, height: int = 84, width: int = 84) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten())
        with torch.no_grad():
            self.out_dim = int(self.net(torch.zeros(1, in_channels, height, width)).shape[1])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.float() / 255.0)


Linear = Callable[[int, int], nn.Module]


class OutputLinear(nn.Linear):
    """A network's output layer (a Q value, a state value, logits, an action's mean): ``nn.Linear``, run in fp32
    under autocast (``policy.amp=bf16``), its input cast up.

    Why: bf16 keeps 8 bits of mantissa, so an output in [256, 512) is rounded to a multiple of 2. A critic
    regressed on returns of hundreds would see that rounding in its prediction and its TD target alike: noise
    as large as a step's reward. The hidden layers, where the arithmetic is, stay in bf16; this layer is one
    row of multiply-adds per output. Without autocast it is ``nn.Linear`` exactly (same parameters and
    ``state_dict`` keys, so checkpoints and exports do not change).

    Examples:
        >>> layer = OutputLinear(4, 1)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     layer(torch.ones(2, 4)).dtype
        torch.float32
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        device_type = x.device.type
        if not _autocast_on(device_type):
            return super().forward(x)
        with torch.autocast(device_type, enabled=False):
            return nn.functional.linear(x.float(), self.weight, self.bias)  # the parameters are fp32


def _takes_device_type() -> bool:
    try:
        torch.is_autocast_enabled("cpu")
    except TypeError:
        return False
    return True


#: torch >= 2.4 asks ``is_autocast_enabled(device_type)``; before, one function per device type. Decided once
#: here, not per call: torch.compile traces the call, and its older dynamo cannot trace a try/except around it
_AUTOCAST_TAKES_DEVICE_TYPE = _takes_device_type()


def _autocast_on(device_type: str) -> bool:
    """Whether autocast is on for ``device_type``."""
    if _AUTOCAST_TAKES_DEVICE_TYPE:
        return torch.is_autocast_enabled(device_type)
    return torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()


def encoder(obs_shape: Sequence[int], hidden_sizes: Sequence[int], activation: type = nn.ReLU,
            linear: Linear = nn.Linear) -> Tuple[nn.Module, int]:
    """The torso for ``obs_shape``: an MLP for flat observations, the Nature CNN followed by an MLP for
    image stacks ``[C, H, W]``. ``linear`` builds the MLP's layers (``NoisyLinear`` for noisy networks; the
    convolutions stay deterministic). Returns the module and its output size."""
    if len(obs_shape) == 1:
        return (mlp(int(obs_shape[0]), hidden_sizes, activation, linear),
                hidden_sizes[-1] if hidden_sizes else int(obs_shape[0]))
    if len(obs_shape) == 3:
        cnn = NatureCNN(*[int(d) for d in obs_shape])
        if not hidden_sizes:
            return cnn, cnn.out_dim
        return nn.Sequential(cnn, mlp(cnn.out_dim, hidden_sizes, activation, linear)), hidden_sizes[-1]
    raise ValueError(f"observations of shape {tuple(obs_shape)} are neither flat nor [C, H, W] images")


def mlp(in_dim: int, hidden_sizes: Sequence[int], activation: type = nn.ReLU, linear: Linear = nn.Linear) -> nn.Sequential:
    """Linear layers (built by ``linear``) with ``activation`` after each; the output size is ``hidden_sizes[-1]``."""
    layers = []
    for size in hidden_sizes:
        layers += [linear(in_dim, size), activation()]
        in_dim = size
    return nn.Sequential(*layers)


#: what a Q head outputs per action: one value, a categorical distribution (C51) or quantiles (QR-DQN)


def _orthogonal(layer: nn.Module, gain: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer
