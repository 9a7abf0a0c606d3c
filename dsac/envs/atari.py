"""Atari (ALE) environments with DeepMind's preprocessing, built from gymnasium's own wrappers
(no Ray, no TensorFlow).

Any ALE id (``ALE/Pong-v5``, ``PongNoFrameskip-v4``, ...) is made with ALE's own frame skip
off and wrapped, innermost first, in:

1. ``AtariPreprocessing``: up to ``noop_max`` no-op starts, ``frame_skip`` repeats with the last
   two frames max-pooled, ``dim`` x ``dim``, grayscale (or RGB);
2. for training only, :class:`EpisodicLife`: losing a life ends the episode *for learning*
   (no bootstrap through it) while the game goes on (Stable-Baselines3's ``EpisodicLifeEnv``);
3. :class:`FireOnLifeStart` for games that wait for FIRE: FIRE is pressed at the start of
   every life, after a reset and after each lost life, in training and in evaluation alike;
4. for training only, :class:`SignReward`: rewards clipped to their sign (SB3's ``ClipRewardEnv``);
5. ``FrameStackObservation``: the last ``framestack`` frames, stack axis first (``(4, 84, 84)``).

Evaluation, and every episode return dsac reports, use the game's real score over full games
(all lives, ALE's 108,000-frame cap): a training env marks its clipped steps with the real
reward (``info["real_reward"]``) and its life-loss ends with ``info["episode_continues"]``,
which :class:`dsac.envs.rollout.EnvCollector` reads.

Evaluation protocol: the greedy policy (no ε: two evaluations of the same weights give the same
score) plays whole games from no-op starts, and in games that wait for FIRE after a lost life
(Breakout, ...) FIRE is pressed for it, as training pressed it at the start of every life.
A policy trained with life-loss ends never needs FIRE, so it never learns to press it; without
this its evaluation games ran to the frame cap (27,000 agent steps of Breakout, lives left).
Stable-Baselines3 and rl-zoo evaluate the same way (their ``AtariWrapper`` with
``FireResetEnv`` and ``EpisodicLifeEnv`` around the evaluation env presses FIRE after every
lost life); the Nature DQN's evaluation ε of 0.05 got the same unsticking by chance and
changed the scores it measured. The same env is what ``dsac-infer`` and
``load_policy(path).make_env()`` give, so a user's game ends as the evaluator's did.

Protocol of the defaults: sticky actions as ALE v5 ids have them (repeat probability 0.25,
as Machado et al. 2018 recommend: without them a policy can memorize action sequences) plus
the no-op starts, life-loss ends and reward clipping of DQN and Ape-X (Mnih et al. 2015, Horgan
et al. 2018) and SB3's ``AtariWrapper``. ``--sticky_actions false`` gives the older protocol
(repeat probability 0, as ``NoFrameskip-v4`` ids and SB3's rl-zoo use).
"""

from __future__ import annotations

import argparse
import dataclasses

import gymnasium as gym
import numpy as np

from dsac.errors import DsacError
from dsac.settings.coercion import framestack_value
from dsac.settings.sections import setting

ATARI_ENTRY_POINT = "ale_py.env:AtariEnv"
# Keys of a step's info that a training env sets (read by the rollout collector).
REAL_REWARD = "real_reward"
EPISODE_CONTINUES = "episode_continues"


def cli_framestack(text: str) -> int:
    """``--framestack`` as argparse reads it: a one-line error for a bad value."""
    try:
        return framestack_value(text)
    except DsacError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None

@dataclasses.dataclass(frozen=True)
class FrameSettings:
    """The frames: preprocessing of Atari envs and of other envs' large frames.

    The frames section of a run's configuration (:class:`dsac.config.Config`; ``launch.py``
    flags of the same names). A weights file keeps them, so a policy loaded from it sees frames as its network
    did; a file written before ``preprocess_images`` existed reads it as false (its network saw
    raw frames).
    """

    framestack: int = setting(4, "frames stacked into one observation (RLlib's model key; true = 4, false = 1)",
                         cli_type=cli_framestack)
    dim: int = setting(84, "side of the square frames in pixels (RLlib's model key)")
    grayscale: bool = setting(True, "one channel per frame instead of RGB (RLlib's model key)")
    preprocess_images: bool = setting(True, "also resize, gray and stack other envs' large uint8 frames (side >= 72, "
                                 "e.g. CarRacing-v3) as ALE's are; false: their raw frames")
    noop_max: int = setting(30, "at most this many no-op actions after each reset (a random count)")
    frame_skip: int = setting(4, "each action repeats this many frames, the last two max-pooled")
    terminal_on_life_loss: bool = setting(True, "training only: a lost life ends the episode for learning; "
                                     "returns are still whole games")
    clip_rewards: bool = setting(True, "training only: rewards become their sign; returns are still the game's score")
    sticky_actions: bool = setting(True, "keep ALE v5's repeat-action probability 0.25 (Machado et al. 2018); false: 0")

    @classmethod
    def from_dict(cls, values: dict) -> FrameSettings:
        """From a dict read from a file: unknown keys and wrong types are refused."""
        names = {f.name: f.type for f in dataclasses.fields(cls)}
        unknown = set(values) - set(names)
        if unknown:
            raise DsacError(f"unknown Atari preprocessing setting(s) {', '.join(sorted(map(str, unknown)))}")
        for key, value in values.items():
            want = bool if names[key] in ("bool", bool) else int
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise DsacError(f"Atari preprocessing setting {key} must be {want.__name__}, got {value!r}")
        settings = cls(**{"preprocess_images": False, **values})
        settings.check()
        return settings

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def check(self) -> None:
        """Every setting in its range (one line naming the flag)."""
        for name, low, high in (("framestack", 1, 16), ("dim", 8, 512), ("noop_max", 0, 10_000), ("frame_skip", 1, 64)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise DsacError(f"--{name} must be an integer in [{low}, {high}], got {value!r}")


def is_atari(target) -> bool:
    """Whether ``target`` (a registered id or an ``EnvSpec``) makes an ALE env."""
    spec = target
    if isinstance(target, str):
        spec = gym.envs.registry.get(target)
    return spec is not None and getattr(spec, "entry_point", None) == ATARI_ENTRY_POINT


def is_atari_id(env_id) -> bool:
    """Whether ``--env`` names an ALE game (registering ALE's ids first when it may)."""
    if not isinstance(env_id, str) or ":" in env_id:
        return False
    if env_id not in gym.envs.registry:
        register_ale_envs()
    return is_atari(env_id)


def register_ale_envs() -> None:
    """Register ALE's ids with gymnasium (importing ``ale_py`` does it; a no-op when it is not
    installed, so the caller's unknown-id error says what to install)."""
    try:
        import ale_py
    except ImportError:
        return
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no start-up banner per env


def base_env_kwargs(env_id: str, env_kwargs: dict, settings: FrameSettings) -> dict:
    """The ALE env's own constructor arguments: its frame skip off (``AtariPreprocessing``
    skips and max-pools) and sticky actions kept or off."""
    for key in ("frameskip", "obs_type"):
        if key in env_kwargs:
            flag = {"frameskip": "--frame_skip", "obs_type": "--grayscale"}[key]
            raise DsacError(f"--env_kwargs {key} is set by dsac's Atari preprocessing for {env_id}: use {flag}")
    kwargs = {**env_kwargs, "frameskip": 1}
    if not settings.sticky_actions:
        kwargs["repeat_action_probability"] = 0.0
    return kwargs


def wrap_atari(env: gym.Env, settings: FrameSettings, training: bool) -> gym.Env:
    """DeepMind's preprocessing around an ALE env made with ``frameskip=1`` (see the module)."""
    try:
        env = gym.wrappers.AtariPreprocessing(
            env, noop_max=settings.noop_max, frame_skip=settings.frame_skip, screen_size=settings.dim,
            terminal_on_life_loss=False, grayscale_obs=settings.grayscale, scale_obs=False,
        )
    except gym.error.DependencyNotInstalled as exc:
        raise DsacError(f"Atari preprocessing needs OpenCV: pip install opencv-python-headless ({exc})") from None
    if waits_for_fire(env):
        env = FireOnLifeStart(env)
    if training and settings.terminal_on_life_loss:
        env = EpisodicLife(env)
    if training and settings.clip_rewards:
        env = SignReward(env)
    if settings.framestack > 1:
        env = gym.wrappers.FrameStackObservation(env, settings.framestack, padding_type="reset")
    return env


def is_large_frame(space) -> bool:
    """Whether observations of ``space`` are frames :func:`wrap_image` preprocesses: uint8
    ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)`` with a shorter side of at least 72 pixels (the
    size that gets the Nature encoder, :mod:`dsac.models.vision`). Smaller images (grid worlds,
    MinAtar) are features more than pictures and are left as they are."""
    from dsac.models.vision import is_large_image

    shape = getattr(space, "shape", None) or ()
    return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8
            and (len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3))) and is_large_image(shape))


def wrap_image(env: gym.Env, settings: FrameSettings) -> gym.Env:
    """An env with large frames (:func:`is_large_frame`, not ALE) preprocessed by gymnasium's
    wrappers as Atari frames are: ``ResizeObservation`` to ``dim``x``dim``, RGB to one gray
    channel (``GrayscaleObservation``) and the last ``framestack`` frames stacked, stack axis
    first (``FrameStackObservation``), so replay stores each frame once. Other envs, and every
    env when ``settings.preprocess_images`` is false, are returned as they are."""
    if not settings.preprocess_images or not is_large_frame(env.observation_space):
        return env
    height, width = env.observation_space.shape[:2]
    try:
        if (height, width) != (settings.dim, settings.dim):
            env = gym.wrappers.ResizeObservation(env, (settings.dim, settings.dim))
    except gym.error.DependencyNotInstalled as exc:
        raise DsacError(
            f"resizing image observations needs OpenCV: pip install opencv-python-headless ({exc})"
        ) from None
    if settings.grayscale and env.observation_space.shape[-1:] == (3,) and len(env.observation_space.shape) == 3:
        env = gym.wrappers.GrayscaleObservation(env)
    if settings.framestack > 1:
        env = gym.wrappers.FrameStackObservation(env, settings.framestack, padding_type="reset")
    return env


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for learning (``terminated``, with
    ``info["episode_continues"] = True``) while the game goes on: the following ``reset``
    returns the current frame instead of restarting the game, unless the game really ended."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True
        self.last = None

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self.lives and not self.game_over:
            terminated = True
            info = {**info, EPISODE_CONTINUES: True}
        self.lives = lives
        self.last = (obs, info)
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        if self.game_over or self.last is None:
            obs, info = self.env.reset(**kwargs)
            self.lives = self.env.unwrapped.ale.lives()
            self.game_over = False
            return obs, info
        obs, info = self.last
        return obs, {k: v for k, v in info.items() if k != EPISODE_CONTINUES}


def waits_for_fire(env: gym.Env) -> bool:
    """Whether the game has FIRE as action 1 (of at least 3): the games that wait for it at the
    start of a life, by the rule of SB3's ``FireResetEnv``."""
    meanings = env.unwrapped.get_action_meanings()
    return len(meanings) >= 3 and meanings[1] == "FIRE"


class FireOnLifeStart(gym.Wrapper):
    """Press FIRE (then action 2, as SB3's ``FireResetEnv`` does) at the start of every life:
    after each reset, and within the step that loses a life when the game goes on.

    The presses' rewards count in that step's reward and their frames are what the step
    returns; a game that ends during them ends the step (a reset that ends is reset again).
    Below :class:`EpisodicLife`, so a training episode that ends at a lost life starts the next
    one with FIRE pressed, and a whole evaluation game never waits for a FIRE the greedy policy
    does not press (see the module's evaluation protocol)."""

    PRESSES = (1, 2)

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        for action in self.PRESSES:
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        if lives < self.lives and not (terminated or truncated):
            for press in self.PRESSES:
                obs, more, terminated, truncated, info = self.env.step(press)
                reward += more
                if terminated or truncated:
                    break
            lives = self.env.unwrapped.ale.lives()
        self.lives = lives
        return obs, reward, terminated, truncated, info


class SignReward(gym.Wrapper):
    """Rewards clipped to {-1, 0, +1} (their sign); the game's own reward is kept in
    ``info["real_reward"]``."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = {**info, REAL_REWARD: float(reward)}
        return obs, float(np.sign(reward)), terminated, truncated, info
