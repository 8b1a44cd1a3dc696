"""baton eval: greedy episodes of a trained run on fresh envs, the result as JSON, videos of env 0's
episodes (mp4, GIF) for gym-made envs and Atari's render twin; bad input is one ``baton:`` line, exit 2."""
from __future__ import annotations

import json
import os
import shutil
import sys

import gymnasium as gym
import numpy as np
import pytest

from commands.cli import main
from commands.evaluate import evaluate_run
from trained_runs import train_tiny


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    return train_tiny(str(tmp_path_factory.mktemp("runs")), "dqn", "CartPole-v1")


def test_eval_writes_mean_std_and_count_as_json(cartpole_run, capsys):
    assert main(["eval", cartpole_run, "--episodes", "5", "--seed", "3"]) == 0
    line = capsys.readouterr().out.strip()
    path = os.path.join(cartpole_run, "eval.json")
    assert line.startswith("baton eval: ") and "over 5 episodes" in line and path in line
    with open(path) as f:
        result = json.load(f)
    returns = np.array(result["returns"])
    assert result["episodes"] == 5 == len(returns) == len(result["lengths"])
    assert result["mean"] == pytest.approx(returns.mean()) and result["std"] == pytest.approx(returns.std())
    assert result["lengths"] == [int(r) for r in returns]  # CartPole pays 1 per step: return = length
    assert result["ckpt"].endswith(os.path.join("ckpt", "best.pth.tar")) and result["seed"] == 3
    assert f"return {result['mean']:.2f} +- {result['std']:.2f}" in line


def test_eval_is_reproducible_and_takes_the_checkpoint_asked(cartpole_run, tmp_path):
    first = evaluate_run(cartpole_run, "latest", episodes=3, seed=7, output=str(tmp_path / "a.json"))
    again = evaluate_run(cartpole_run, "latest", episodes=3, seed=7, num_envs=1, output=str(tmp_path / "b.json"))
    assert first["ckpt"].endswith("latest.pth.tar") and (tmp_path / "a.json").is_file()
    # the episodes are the seeds', not the envs': one env after another plays the same ones
    assert sorted(first["returns"]) == sorted(again["returns"])
    with open(os.path.join(cartpole_run, "summary.json")) as f:
        assert first["env_step"] == json.load(f)["env_step"]  # latest holds the run's final counters
    by_path = evaluate_run(cartpole_run, first["ckpt"], episodes=3, seed=7, output=str(tmp_path / "c.json"))
    assert by_path["returns"] == first["returns"]


@pytest.mark.parametrize("gif", [False, True])
def test_eval_video_films_each_episode_from_reset_to_its_last_step(cartpole_run, tmp_path, gif):
    import imageio.v3 as iio

    out = tmp_path / "videos"
    result = evaluate_run(cartpole_run, episodes=2, seed=0, output=str(tmp_path / "e.json"), video=str(out), gif=gif)
    assert len(result["videos"]) == 2 and sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in result["videos"])
    for path, length in zip(result["videos"], result["lengths"]):
        assert path.endswith(".gif" if gif else ".mp4")
        # the reset frame, then one per step, the last one included (a GIF keeps a frame that repeats the one
        # before as a longer duration of that one: its length in time counts them)
        played = _gif_duration_ms(path) / 20.0 if gif else len(_mp4_frames(path))  # CartPole renders at 50 fps
        assert played == length + 1
        assert iio.imread(path, index=0).shape == (400, 600, 3)


def _gif_duration_ms(path):
    from PIL import Image, ImageSequence

    with Image.open(path) as image:
        return sum(frame.info["duration"] for frame in ImageSequence.Iterator(image))


def _mp4_frames(path):
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(path)
    meta = next(reader)
    return [np.frombuffer(frame, np.uint8).reshape(meta["size"][1], meta["size"][0], 3) for frame in reader]


def test_eval_films_atari_through_its_render_twin(tmp_path_factory, tmp_path):
    pytest.importorskip("ale_py")
    import imageio.v3 as iio

    run = train_tiny(str(tmp_path_factory.mktemp("atari")), "dqn", "ALE/Pong-v5", max_env_step=64,
                     extra=["env.max_episode_steps=40", "env.frame_stack=2",
                            "policy.model.encoder_hidden_size_list=[16]"])
    result = evaluate_run(run, episodes=1, seed=0, output=str(tmp_path / "e.json"), video=str(tmp_path / "v"),
                          gif=True)
    [path] = result["videos"]
    assert result["lengths"] == [40] and iio.imread(path, index=0).shape == (210, 160, 3)  # RGB screens, not 84x84
    # at the game's speed, 15 steps/s: the 10 ms GIF ticks alternate (60, 70, 70 ms) so that the whole is 41 / 15 s
    assert _gif_duration_ms(path) == pytest.approx(41 * 1000 / 15, abs=10)


def test_eval_of_a_box2d_run(tmp_path_factory, tmp_path):
    pytest.importorskip("Box2D")
    run = train_tiny(str(tmp_path_factory.mktemp("box2d")), "dqn", "LunarLander-v3", max_env_step=64,
                     extra=["env.max_episode_steps=30"])
    result = evaluate_run(run, episodes=2, seed=0, output=str(tmp_path / "e.json"), video=str(tmp_path / "v"))
    assert result["episodes"] == 2 and len(result["videos"]) == 2 and max(result["lengths"]) <= 30


def test_eval_of_a_goal_env_says_its_success_rate(tmp_path_factory, capsys):
    """An env that says whether an episode met its goal (``info["is_success"]``): the rate beside the return, as
    ``eval/success_rate`` in training; a bit-flipping episode meets its goal exactly when its return beats -4."""
    run = train_tiny(str(tmp_path_factory.mktemp("bits")), "dqn", "BitFlipping-v0", max_env_step=64,
                     extra=["env.env_kwargs.n_bits=4", "env.max_episode_steps=4"])
    assert main(["eval", run, "--episodes", "8"]) == 0
    line = capsys.readouterr().out.strip()
    with open(os.path.join(run, "eval.json")) as f:
        result = json.load(f)
    assert result["success_rate"] == pytest.approx(np.mean(np.array(result["returns"]) > -4))
    assert f"success rate {result['success_rate']:.2f}" in line


# ---- bad input -----------------------------------------------------------------------------------------
def _one_error_line(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("baton: "), err
    return err


def test_eval_without_a_run_or_a_checkpoint_says_which(cartpole_run, tmp_path, capsys):
    assert main(["eval", str(tmp_path / "absent")]) == 2
    assert "no such run directory" in _one_error_line(capsys)
    empty = tmp_path / "no_ckpt"
    empty.mkdir()
    shutil.copy(os.path.join(cartpole_run, "config.json"), empty / "config.json")
    assert main(["eval", str(empty)]) == 2
    assert "holds no checkpoint" in _one_error_line(capsys)
    assert main(["eval", cartpole_run, "--ckpt", str(tmp_path / "x.pth.tar")]) == 2
    assert "best.pth.tar, latest.pth.tar" in _one_error_line(capsys)  # what the run has
    assert main(["eval", str(tmp_path)]) == 2
    assert "config.json is missing" in _one_error_line(capsys)


def test_eval_video_without_its_extra_names_the_extra(cartpole_run, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # import fails as if not installed
    assert main(["eval", cartpole_run, "--video", str(tmp_path / "v")]) == 2
    assert '".[video]"' in _one_error_line(capsys)
    assert main(["eval", cartpole_run, "--gif"]) == 2
    assert "--video DIR" in _one_error_line(capsys)


class _NoRgbEnv(gym.Env):
    metadata = {"render_modes": ["ansi"]}

    def __init__(self, render_mode=None):
        self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)  # CartPole's spaces: the run's policy fits
        self.action_space = gym.spaces.Discrete(2)
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        return np.zeros(4, np.float32), {}

    def step(self, action):
        return np.zeros(4, np.float32), 1.0, True, False, {}


def test_eval_video_of_an_env_without_rgb_rendering_says_so(cartpole_run, tmp_path, capsys):
    if "BatonNoRgb-v0" not in gym.registry:
        gym.register("BatonNoRgb-v0", entry_point=_NoRgbEnv)
    run = tmp_path / "norgb"
    shutil.copytree(cartpole_run, run)
    with open(run / "config.json") as f:
        cfg = json.load(f)
    cfg["env"].update(type="gym", env_id="BatonNoRgb-v0")  # a run of --env BatonNoRgb-v0
    with open(run / "config.json", "w") as f:
        json.dump(cfg, f)
    assert main(["eval", str(run), "--video", str(tmp_path / "v")]) == 2
    err = _one_error_line(capsys)
    assert "BatonNoRgb-v0" in err and "renders no RGB frames" in err and "'ansi'" in err


@pytest.mark.distributed
@pytest.mark.timeout(240)
def test_eval_of_a_run_trained_under_ddp(tmp_path):
    """Rank 0 writes the checkpoints of a DDP run (the other ranks only their replay shards): eval reads them."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    config = os.path.join(root, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_ddp_config.py")
    run = str(tmp_path / "ddp_run")
    proc = subprocess.run([sys.executable, "-m", "commands", "train", "-c", config, "--nproc", "2", "--max-env-step",
                           "512", "--exp-name", run, "--no-progress", "policy.eval.evaluator.eval_freq=2",
                           "ckpt.save_replay_buffer=true"], cwd=root, capture_output=True, text=True, timeout=200,
                          env=dict(os.environ, OMP_NUM_THREADS="1", BATON_DDP_TIMEOUT="60"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any(".rank1." in name for name in os.listdir(os.path.join(run, "ckpt")))  # rank 1's shard beside them
    result = evaluate_run(run, "latest", episodes=4, seed=0)
    assert result["episodes"] == 4 and result["ckpt"].endswith("latest.pth.tar")
    with open(os.path.join(run, "summary.json")) as f:
        assert result["env_step"] == json.load(f)["env_step"]  # the whole job's counters


def test_eval_video_into_a_file_is_refused_before_any_episode(cartpole_run, tmp_path, capsys, monkeypatch):
    """Issue 34: ``--video`` naming an existing file was a FileExistsError traceback after the episodes."""
    import commands.evaluate

    played = []
    monkeypatch.setattr(commands.evaluate, "evaluate_episodes", lambda *a, **k: played.append(1))
    in_the_way = tmp_path / "videos"
    in_the_way.write_text("a file")
    assert main(["eval", cartpole_run, "--episodes", "1", "--video", str(in_the_way), "-o",
                 str(tmp_path / "e.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"baton: --video {in_the_way}: a file is there, not a directory; give --video a directory you " \
                  f"can write (made if missing)"
    assert not played and not (tmp_path / "e.json").exists()


def test_eval_interrupted_is_one_line_and_status_130(cartpole_run, tmp_path, capsys, monkeypatch):
    """Issue 34: Ctrl-C during ``baton eval`` printed a KeyboardInterrupt traceback every time."""
    import commands.evaluate

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands.evaluate, "evaluate_episodes", interrupted)
    assert main(["eval", cartpole_run, "--episodes", "2", "-o", str(tmp_path / "e.json")]) == 130
    err = capsys.readouterr().err.strip()
    assert err == "baton eval: interrupted; no result was written (the videos of finished episodes stay)"
    assert not (tmp_path / "e.json").exists()


@pytest.fixture(scope="module")
def hopper_run(tmp_path_factory):
    pytest.importorskip("mujoco")
    return train_tiny(str(tmp_path_factory.mktemp("mujoco")), "sac", "Hopper-v5", max_env_step=64,
                      extra=["env.max_episode_steps=20"])


def _headless(**more):
    """This process's environment without a display or a chosen OpenGL backend, as on a cluster node."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL",
                                                               "PYOPENGL_PLATFORM")}
    return dict(env, OMP_NUM_THREADS="1", **more)


@pytest.mark.skipif(__import__("ctypes.util").util.find_library("EGL") is None, reason="no libEGL on this machine")
def test_eval_films_a_mujoco_env_on_a_machine_without_a_display(hopper_run, tmp_path):
    """Issue 34: a headless ``--video`` of a MuJoCo env was a 40-line traceback unless MUJOCO_GL was set; the
    off-screen backend is now chosen before MuJoCo loads (EGL first)."""
    import subprocess

    videos = tmp_path / "videos"
    done = subprocess.run([sys.executable, "-m", "commands", "eval", hopper_run, "--episodes", "1", "--video",
                           str(videos), "-o", str(tmp_path / "e.json")], capture_output=True, text=True,
                          timeout=240, env=_headless())
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(videos.iterdir())
    assert len(files) == 1 and files[0].suffix == ".mp4" and files[0].stat().st_size > 1000


@pytest.mark.parametrize("backend", ["osmesa", "no_such_backend"])
def test_eval_video_of_mujoco_without_a_working_backend_names_mujoco_gl(hopper_run, tmp_path, backend):
    """OSMesa asked for without its library (an AttributeError inside PyOpenGL), or a name MuJoCo does not
    know: one ``baton:`` line naming MUJOCO_GL and the libraries, exit 2."""
    import ctypes.util
    import subprocess

    if backend == "osmesa" and ctypes.util.find_library("OSMesa"):
        pytest.skip("OSMesa is installed here: it would render")
    done = subprocess.run([sys.executable, "-m", "commands", "eval", hopper_run, "--episodes", "1", "--video",
                           str(tmp_path / "v"), "-o", str(tmp_path / "e.json")], capture_output=True, text=True,
                          timeout=240, env=_headless(MUJOCO_GL=backend))
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("baton: ") and "MUJOCO_GL" in lines[-1] and "Traceback" not in done.stderr


def test_eval_video_on_a_full_disk_is_one_line_status_1_and_leaves_no_part_of_a_file(cartpole_run, tmp_path, capsys,
                                                                                    monkeypatch):
    """Issue 34: a full disk while ffmpeg wrote printed its stderr and a traceback, and left an undecodable mp4.
    The mp4 is written aside and renamed when its episode ends: a failure removes it. Here ffmpeg's pipe breaks
    at the 3rd frame while the disk reports ENOSPC, as a real full disk does."""
    import errno

    import imageio_ffmpeg

    real = imageio_ffmpeg.write_frames

    def fills_up(path, *args, **kwargs):
        writer = real(path, *args, **kwargs)
        writer.send(None)

        def frames():
            sent = 0
            frame = yield
            while True:
                sent += 1
                if sent == 3:
                    writer.close()
                    raise OSError(errno.ENOSPC, "No space left on device")
                writer.send(frame)
                frame = yield
        return frames()

    monkeypatch.setattr(imageio_ffmpeg, "write_frames", fills_up)
    videos = tmp_path / "videos"
    assert main(["eval", cartpole_run, "--episodes", "1", "--video", str(videos), "-o", str(tmp_path / "e.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"baton: cannot write {videos}/") and "no space left" in err
    assert os.listdir(videos) == [] and not (tmp_path / "e.json").exists()


def test_a_run_of_an_env_module_runs_it_only_on_the_user_s_import(cartpole_run, tmp_path, capsys, monkeypatch,
                                                                  request):
    """``--env my_module:MyEnv-v0``: gymnasium imports the module to make the env. A run directory's config.json
    naming one runs nothing: baton eval says which module to give ``--import``, and imports it only then."""
    marker = tmp_path / "imported"
    (tmp_path / "planted_env_mod.py").write_text(
        f"import gymnasium as gym\nopen({str(marker)!r}, 'w').close()\n"
        "gym.register('PlantedCartPole-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv', "
        "max_episode_steps=50)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: (sys.modules.pop("planted_env_mod", None),  # gone again after the test: other
                                  gym.registry.pop("PlantedCartPole-v0", None)))  # tests list the registered ids
    run = tmp_path / "planted"
    shutil.copytree(cartpole_run, run)
    with open(run / "config.json") as f:
        cfg = json.load(f)
    cfg["env"].update(type="gym", env_id="planted_env_mod:PlantedCartPole-v0")
    with open(run / "config.json", "w") as f:
        json.dump(cfg, f)
    assert main(["eval", str(run), "--episodes", "1"]) == 2
    err = _one_error_line(capsys)
    assert "--import planted_env_mod" in err and not marker.exists()
    assert main(["eval", str(run), "--episodes", "1", "--import", "planted_env_mod"]) == 0
    assert marker.exists()
