"""How large a network a run's settings may imply: one rule for the flag path (``launch.py``,
``Trainer``, a ``--config`` file, a resumed run's record) and the file path (a weights file's
``model``, ``observation_space`` and ``action_space``), checked before anything is built.

What the settings imply is counted here from the numbers alone, never by building: the conv
encoder's layers on the observation's shape, then the MLP of the hidden widths from its output
(plus the action, for a critic of continuous actions) to the outputs (a Q-value per action and
C51 atom, or a Gaussian's mean and log-std per action dimension; SAC's image actor reads a
50-feature projection instead, so its count is an upper bound). Every network of a run is
refused above :data:`MAX_PARAMETERS`, and every layer above :data:`MAX_LAYER_OUTPUTS` values per
observation; C51's atoms above :data:`MAX_NUM_ATOMS`. The bounds are docs/safety.md's.
"""

from __future__ import annotations

import itertools
import math

import gymnasium as gym

from dsac.errors import DsacError

# C51 uses 51 atoms; the learner's projection holds batch x atoms x atoms values.
MAX_NUM_ATOMS = 1_000
# The values one layer computes for one observation (a hidden width, a conv layer's H x W x
# channels, DQN's actions x atoms): 40 MB of float32, and a training batch holds tens of them.
MAX_LAYER_OUTPUTS = 10_000_000
# The parameters of one network: 400 MB of float32, and a learner keeps several copies of each
# (targets, Adam's two moments, gradients).
MAX_PARAMETERS = 100_000_000


def check_num_atoms(value) -> None:
    """``--num_atoms`` within [1, :data:`MAX_NUM_ATOMS`] (before a support of that size is made)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NUM_ATOMS:
        raise DsacError(f"--num_atoms must be an integer in [1, {MAX_NUM_ATOMS:,}], got {value!r}")


def check_widths(name: str, widths) -> None:
    """Hidden layer sizes: one or more positive integers, none above :data:`MAX_LAYER_OUTPUTS`."""
    if not isinstance(widths, list | tuple) or not widths or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_LAYER_OUTPUTS for n in widths):
        shown = shorten(widths)
        raise DsacError(f"--{name} must be positive layer sizes of at most {MAX_LAYER_OUTPUTS:,}, got {shown}")


def _dense(sizes: list[int]) -> int:
    """Parameters of dense layers whose widths, input first, are ``sizes``."""
    return sum(n_in * n_out + n_out for n_in, n_out in itertools.pairwise(sizes))


def network_sizes(model, algorithm, observation_space, action_space) -> dict[str, tuple[int, str]]:
    """``{network: (parameters, the setting of its hidden widths)}`` of the networks the run's
    ``model`` and ``algorithm`` sections imply on these spaces, each layer's outputs checked
    against :data:`MAX_LAYER_OUTPUTS` on the way (a one-line :class:`DsacError`)."""
    from dsac.models.vision import (
        ObsInput,
        check_conv_filters,
        conv_layer_shapes,
        default_conv_filters,
        obs_input,
    )

    check_widths("fcnet_hiddens", model.fcnet_hiddens)
    try:
        obs = obs_input(observation_space)
    except DsacError:  # no image layout: a user's policy class reads such observations its own way
        obs = ObsInput((math.prod(observation_space.shape),), str(observation_space.dtype))
    encoder, features = 0, obs.flat_dim
    if obs.is_image:
        filters = check_conv_filters(model.conv_filters) if model.conv_filters else default_conv_filters(obs.shape)
        shapes = conv_layer_shapes(obs.shape, filters)  # one line if a layer does not fit its input
        for i, ((_, _, channels), (height, width, out)) in enumerate(itertools.pairwise(shapes)):
            if height * width * out > MAX_LAYER_OUTPUTS:
                raise DsacError(f"conv_filters layer {i} {filters[i]} makes {height}x{width}x{out} values per "
                                f"observation {tuple(obs.shape)}, more than {MAX_LAYER_OUTPUTS:,}")
            encoder += filters[i][1] ** 2 * channels * out + out
        features = math.prod(shapes[-1])
    if isinstance(action_space, gym.spaces.Discrete):
        atoms = int(getattr(algorithm, "num_atoms", 1))
        check_num_atoms(atoms)
        outputs = int(action_space.n) * atoms
        if outputs > MAX_LAYER_OUTPUTS:
            raise DsacError(f"{int(action_space.n):,} actions x {atoms:,} atoms make {outputs:,} Q-values per "
                            f"observation, more than {MAX_LAYER_OUTPUTS:,}")
        value_head = _dense([model.fcnet_hiddens[-1], atoms]) if getattr(algorithm, "dueling", False) else 0
        hidden = f"fcnet_hiddens {shorten(model.fcnet_hiddens)}"
        networks = {"the Q-network": (encoder + _dense([features, *model.fcnet_hiddens, outputs]) + value_head, hidden)}
    else:
        act_dim = math.prod(int(n) for n in action_space.shape)
        if 2 * act_dim > MAX_LAYER_OUTPUTS:
            raise DsacError(f"{act_dim:,} action dimensions are more than {MAX_LAYER_OUTPUTS // 2:,}")
        critic = getattr(algorithm, "critic_hiddens", None)  # CrossQ's critics have widths of their own
        critic_flag = "critic_hiddens" if critic else "fcnet_hiddens"
        critic = critic or model.fcnet_hiddens
        check_widths(critic_flag, critic)
        networks = {
            "the actor": (encoder + _dense([features, *model.fcnet_hiddens, 2 * act_dim]),
                          f"fcnet_hiddens {shorten(model.fcnet_hiddens)}"),
            "a critic": (encoder + _dense([features + act_dim, *critic, 1]), f"{critic_flag} {shorten(critic)}"),
        }
    return networks


def check_network_size(model, algorithm, observation_space, action_space) -> None:
    """Refuse, in one line, settings (the run's ``model`` and ``algorithm`` sections) that imply
    a network or a layer above the bounds (see the module's text), before anything of that size
    is allocated."""
    networks = network_sizes(model, algorithm, observation_space, action_space)
    name, (parameters, hidden) = max(networks.items(), key=lambda item: item[1][0])
    if parameters > MAX_PARAMETERS:
        raise DsacError(f"{name} of {hidden} on observations of shape {tuple(observation_space.shape)} has "
                        f"{parameters:,} parameters, more than the {MAX_PARAMETERS:,} dsac builds")


def shorten(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
