"""Videos of evaluation episodes (``baton eval --video DIR [--gif]``): env 0's episodes, one file each.

Frames come from the env itself, as the episodes are played (no second run of the policy):

- an env type built from ``gym.make`` (classic control, Box2D, any gymnasium id) is made with
  ``render_mode="rgb_array"``, and env 0 is wrapped so that it renders after its reset and after each step,
  before the vector env's autoreset: an episode's last frame is kept;
- an env type that builds its own vector env (``make_vector``: ale-py's ``AtariVectorEnv``, which does not
  render) gives a render twin, ``make_render_twin(env_cfg)``: one env of the same game and dynamics whose
  observations are RGB screens, stepped in lockstep with env 0 (same seed, same actions; the emulator is
  deterministic, and the twin's frame counter is checked against env 0's at every step).

Files are written as the episodes end, ``<prefix>-episode<k>.mp4`` (H.264 through ``imageio-ffmpeg``, which
ships its own ffmpeg binary) or ``.gif`` (through ``imageio`` and pillow). Why not gymnasium's
``RecordVideo``: it wraps one ``gym.Env`` (Atari's vector env is none), and it writes through moviepy, whose
releases pin pillow below the version installed with our other extras; ``imageio`` with ``imageio-ffmpeg``
(the ``video`` extra) are two wheels without such pins.
"""
from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator, List, Mapping, Optional

import gymnasium as gym
import numpy as np

from engine.fileio import atomic_file, atomic_write_path

__all__ = ["VideoError", "EpisodeVideos", "rendering_env_type", "with_render_twin", "check_video_extra",
           "VIDEO_EXTRA", "gif_durations_ms"]

VIDEO_EXTRA = 'pip install -c constraints.txt -e ".[video]"'


class VideoError(ValueError):
    """A video that cannot be made as asked: the env renders no RGB frames, or the ``video`` extra is missing."""


def check_video_extra(gif: bool) -> None:
    """Raise ``VideoError`` naming the ``video`` extra when the writer for ``gif`` / mp4 is not installed."""
    try:
        import imageio.v3  # noqa: F401
        if not gif:
            import imageio_ffmpeg  # noqa: F401
    except ImportError as err:
        raise VideoError(f"--video needs the video extra ({err.name or 'imageio'} is not installed): "
                         f"{VIDEO_EXTRA}") from None


#: OpenGL backends MuJoCo renders with off screen, in the order they are tried, and the library each needs
_HEADLESS_GL = (("egl", "EGL", "libegl1"), ("osmesa", "OSMesa", "libosmesa6"))


def choose_gl_backend() -> Optional[str]:
    """On a machine without a display (a cluster node, CI) and with ``MUJOCO_GL`` unset, set ``MUJOCO_GL`` (and
    PyOpenGL's ``PYOPENGL_PLATFORM``) to the first off-screen backend whose library is installed, EGL first, so
    that MuJoCo envs render for ``--video``. Call it before MuJoCo is imported (MuJoCo reads the variable then).
    Returns the backend chosen, or None where nothing was changed."""
    if os.environ.get("MUJOCO_GL") or os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") \
            or "mujoco" in sys.modules:
        return None
    import ctypes.util

    for backend, library, _ in _HEADLESS_GL:
        if ctypes.util.find_library(library):
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
    return None


def gl_failure(err: BaseException) -> Optional[VideoError]:
    """The ``VideoError`` for an env that could not render because no OpenGL context could be made (MuJoCo
    without a display), naming ``MUJOCO_GL`` and the libraries; None for any other error."""
    text = f"{type(err).__name__}: {err}"
    if not any(word in text for word in ("OpenGL", "glGetError", "EGL", "OSMesa", "GLFW", "MUJOCO_GL")):
        return None
    libraries = ", ".join(f"MUJOCO_GL={backend} with {package}" for backend, _, package in _HEADLESS_GL)
    return VideoError(f"--video: the env could not render without a display ({text.splitlines()[0][:160]}); set "
                      f"MUJOCO_GL to an off-screen backend whose library is installed ({libraries})")


class _Dropped(Exception):
    """An episode cut short: its video is dropped."""


class EpisodeVideos:
    """Writes each episode's frames to its own file as it ends, up to ``max_episodes`` files.

    Args:
        directory: where the files go (made if missing).
        prefix: the start of each file name: ``<prefix>-episode<k>.<mp4|gif>``.
        gif: write GIFs instead of mp4.
        max_episodes: episodes to write; frames of later ones are dropped.

    ``fps``, the frames per second of the files, is set by what renders (the env's ``render_fps``) before the
    first frame; 30 if nothing does.
    """

    def __init__(self, directory: str, prefix: str, gif: bool, max_episodes: int) -> None:
        check_video_extra(gif)
        try:  # the place checked before any episode is played, not after
            os.makedirs(directory, exist_ok=True)
        except OSError as err:
            raise VideoError(f"--video {directory}: " + ("a file is there, not a directory" if os.path.isfile(directory)
                             else f"cannot make the directory ({err.strerror})") +
                             "; give --video a directory you can write (made if missing)") from None
        if not os.access(directory, os.W_OK):
            raise VideoError(f"--video {directory}: the directory cannot be written (read-only); give --video a "
                             f"directory you can write (made if missing)")
        self._directory, self._prefix, self._gif = directory, prefix, gif
        self.fps: Optional[float] = None
        self._max = int(max_episodes)
        self._frames: List[np.ndarray] = []
        self._mp4: Any = None  # the ffmpeg writer of the episode being written (a generator)
        self._file = contextlib.ExitStack()  # its file: written aside, renamed into place when the episode ends
        self.paths: List[str] = []

    @property
    def _recording(self) -> bool:
        return len(self.paths) < self._max

    def _path(self) -> str:
        return os.path.join(self._directory, f"{self._prefix}-episode{len(self.paths)}.{'gif' if self._gif else 'mp4'}")

    def add(self, frame: Any) -> None:
        """One frame (``[H, W, 3]`` uint8) of the episode being played."""
        if not self._recording:
            return
        frame = np.ascontiguousarray(frame, dtype=np.uint8)
        if self._gif:
            self._frames.append(frame)
            return
        with self._dropped_on_error():
            if self._mp4 is None:
                import imageio_ffmpeg

                tmp = self._file.enter_context(atomic_file(self._path(), prefix="tmp-"))
                self._mp4 = imageio_ffmpeg.write_frames(tmp, (frame.shape[1], frame.shape[0]), fps=self._fps(),
                                                        macro_block_size=2, quality=7)
                self._mp4.send(None)  # the generator's start
            self._mp4.send(frame)

    def end_episode(self) -> None:
        """The episode ended: write (or finish) its file."""
        if not self._recording:
            return
        path = self._path()
        if self._gif:
            if not self._frames:
                return
            import imageio.v3 as iio

            frames, self._frames = np.stack(self._frames), []
            durations = gif_durations_ms(len(frames), self._fps())
            atomic_write_path(path, lambda tmp: iio.imwrite(tmp, frames, extension=".gif",
                                                            duration=durations, loop=0), prefix="tmp-")
        else:
            if self._mp4 is None:
                return
            with self._dropped_on_error():
                self._mp4.close()  # ffmpeg finishes the file
                self._mp4 = None
                self._file.close()  # and it is renamed into place, whole
        self.paths.append(path)

    @contextlib.contextmanager
    def _dropped_on_error(self) -> Iterator[None]:
        """An error while an mp4 is written (a full disk: ``engine.fileio.DiskFullError``, naming the file)
        leaves no part of it: the writer is stopped and its file removed."""
        try:
            yield
        except BaseException:
            if self._mp4 is not None:
                with contextlib.suppress(Exception):
                    self._mp4.close()
                self._mp4 = None
            self._file.__exit__(*sys.exc_info())  # removes the file aside; a full disk: raises DiskFullError
            self._file = contextlib.ExitStack()
            raise

    def restart(self) -> None:
        """The env was reset: drop the frames of an episode cut short (it is no episode of the evaluation)."""
        if self._mp4 is not None:
            with contextlib.suppress(_Dropped):
                with self._dropped_on_error():
                    raise _Dropped  # its file aside is removed, not renamed into place
        self._frames = []

    close = restart  # the evaluation ended: an episode still running is dropped

    def _fps(self) -> float:
        return float(self.fps or 30.0)


def gif_durations_ms(frames: int, fps: float) -> List[int]:
    """Each GIF frame's duration: GIF keeps whole hundredths of a second, so one duration for all would play
    Atari's 15 fps (66.7 ms) at 60 ms, 11% fast; frame k lasts from its start to the next one's, each rounded to
    10 ms, so the file plays at the game's speed (60, 70, 70, 60, ...) and 50 fps stays 20 ms.

    Examples:
        >>> gif_durations_ms(6, 15.0), sum(gif_durations_ms(15, 15.0))
        ([70, 60, 70, 70, 60, 70], 1000)
        >>> gif_durations_ms(3, 50.0)
        [20, 20, 20]
    """
    ends = [int(round((k * 100.0 / fps))) * 10 for k in range(frames + 1)]
    return [max(10, end - start) for start, end in zip(ends, ends[1:])]


class _RenderEachStep(gym.Wrapper):
    """Renders env 0 after its reset and after each step (before the vector env's autoreset) into ``videos``."""

    def __init__(self, env: gym.Env, videos: EpisodeVideos) -> None:
        super().__init__(env)
        self._videos = videos

    def _frame(self) -> None:
        frame = self.env.render()
        if not (isinstance(frame, np.ndarray) and frame.ndim == 3 and frame.shape[-1] == 3):
            raise VideoError(f"env {self.env.spec.id if self.env.spec else self.env!r} rendered "
                             f"{type(frame).__name__} {getattr(frame, 'shape', '')}, not an RGB frame [H, W, 3]: "
                             f"evaluate it without --video")
        self._videos.add(frame)

    def reset(self, **kwargs: Any):
        out = self.env.reset(**kwargs)
        self._videos.restart()
        self._frame()
        return out

    def step(self, action: Any):
        out = self.env.step(action)
        self._frame()
        if out[2] or out[3]:
            self._videos.end_episode()
        return out


class _RenderingEnvType:
    """``env_type`` whose envs render RGB frames, env 0 (the first made) into ``videos``."""

    def __init__(self, env_type: Any, videos: EpisodeVideos) -> None:
        self._env_type, self._videos = env_type, videos
        self._made = 0

    def default_config(self) -> Mapping[str, Any]:
        return self._env_type.default_config()

    def make(self, env_cfg: Mapping[str, Any]) -> gym.Env:
        # pygame draws the frames off screen: no display is needed, and SDL would complain of having none
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        cfg = dict(env_cfg, env_kwargs=dict(env_cfg.get("env_kwargs") or {}, render_mode="rgb_array"))
        env = self._env_type.make(cfg)
        modes = list(env.metadata.get("render_modes") or [])
        if "rgb_array" not in modes:
            env.close()
            raise VideoError(f"env {env_cfg.get('env_id')!r} renders no RGB frames (its render modes: "
                             f"{modes or 'none'}): --video needs rgb_array rendering; evaluate it without --video")
        self._made += 1
        if self._made > 1:
            return env
        if self._videos.fps is None:
            self._videos.fps = env.metadata.get("render_fps")
        return _RenderEachStep(env, self._videos)


def rendering_env_type(env_type: Any, env_cfg: Mapping[str, Any], videos: EpisodeVideos) -> Any:
    """The env type to build the evaluation envs with so that env 0's frames go to ``videos``: ``env_type``
    made to render (envs of ``gym.make``), or ``env_type`` itself when it renders through a twin
    (``with_render_twin``).

    Raises:
        VideoError: an env type that builds its own vector env and has no render twin.
    """
    if hasattr(env_type, "make_vector"):
        if not hasattr(env_type, "make_render_twin"):
            raise VideoError(f"env type {type(env_type).__name__} builds its own vector env and gives no frames "
                             f"(no make_render_twin): evaluate it without --video")
        if hasattr(env_type, "render_fps") and videos.fps is None:
            videos.fps = float(env_type.render_fps(env_cfg))
        return env_type
    return _RenderingEnvType(env_type, videos)


class _TwinFrames(gym.vector.VectorWrapper):
    """A vector env whose env 0 is mirrored by ``twin`` (a one-env vector env of RGB screens, stepped with the
    same seed and actions); the twin's screens go to ``videos``."""

    def __init__(self, env: gym.vector.VectorEnv, twin: gym.vector.VectorEnv, videos: EpisodeVideos) -> None:
        super().__init__(env)
        self._twin, self._videos = twin, videos

    @staticmethod
    def _screen(obs: np.ndarray) -> np.ndarray:
        return obs[0, -1] if obs.ndim == 5 else obs[0]  # [1, stack, H, W, 3]: the newest screen of env 0

    def reset(self, *, seed: Any = None, options: Any = None):
        obs, info = self.env.reset(seed=seed, options=options)
        twin_seed = None if seed is None else np.asarray([int(np.ravel(seed)[0])], dtype=np.int64)
        twin_obs, _ = self._twin.reset(seed=twin_seed, options=options)
        self._videos.restart()
        self._videos.add(self._screen(twin_obs))
        return obs, info

    def step(self, actions: Any):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        twin_obs, _, twin_term, twin_trunc, twin_info = self._twin.step(np.asarray(actions)[:1])
        frames, twin_frames = info.get("episode_frame_number"), twin_info.get("episode_frame_number")
        if frames is not None and twin_frames is not None and int(frames[0]) != int(twin_frames[0]):
            raise VideoError(f"the render twin of env 0 went out of step (frame {int(twin_frames[0])} against "
                             f"{int(frames[0])}): the env is not deterministic under the same seed and actions")
        if bool(twin_term[0] or twin_trunc[0]) != bool(terminated[0] or truncated[0]):
            raise VideoError("the render twin of env 0 went out of step (its episode ended where env 0's did not, "
                             "or the reverse): the env is not deterministic under the same seed and actions")
        if twin_term[0] or twin_trunc[0]:
            final = twin_info.get("final_obs")
            self._videos.add(self._screen(final if final is not None else twin_obs))
            self._videos.end_episode()
        self._videos.add(self._screen(twin_obs))
        return obs, reward, terminated, truncated, info

    def close(self, **kwargs: Any) -> None:
        self._twin.close()
        self.env.close(**kwargs)


def with_render_twin(env: gym.vector.VectorEnv, env_type: Any, env_cfg: Mapping[str, Any],
                     videos: EpisodeVideos) -> gym.vector.VectorEnv:
    """``env`` with env 0 mirrored by ``env_type.make_render_twin(env_cfg)`` into ``videos`` (module docstring);
    ``env`` itself for env types made to render (``rendering_env_type``)."""
    if not hasattr(env_type, "make_vector"):
        return env
    return _TwinFrames(env, env_type.make_render_twin(env_cfg), videos)
