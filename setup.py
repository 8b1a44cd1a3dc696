"""Distribution of baton: an event-driven middleware pipeline for RL that scales with PyTorch DDP."""
from setuptools import find_packages, setup

with open("README.md", encoding="utf-8") as readme:
    long_description = readme.read()

setup(
    name="baton-rl",
    version="0.1.0",
    description="Reinforcement-learning pipelines as middleware, from one CPU to many GPUs with PyTorch DDP",
    long_description=long_description,
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["engine", "engine.*", "data", "data.*", "middleware", "middleware.*",
                                    "policies", "policies.*", "pipelines", "pipelines.*", "commands", "commands.*",
                                    "dizoo", "dizoo.*"]),
    install_requires=[
        "torch>=2.1",
        "gymnasium>=1.1",  # AutoresetMode.SAME_STEP
        "DI-treetensor>=0.4",
        "easydict>=1.9",
        "tensorboardX>=2.5",
        "numpy",
        "tqdm>=4.60",
    ],
    extras_require={
        # the box2d packages, ale-py, mujoco, gymnasium-robotics and minigrid are in the test extra so CI runs the
        # LunarLander, Pong, MuJoCo, FetchReach and MiniGrid configs too; minigrid brings pygame-ce, which provides
        # the pygame module box2d's rendering imports (pygame itself beside it would overwrite the same files)
        # pytest-xdist: the suite runs on every core (pytest.ini: -n auto, capped in tests/conftest.py)
        # imageio*, onnx*: baton eval --video and baton export --format onnx are tested, the exported file run
        # back through onnxruntime; optuna, wandb, mlflow: baton tune and the trackers are tested for real, offline
        "test": ["pytest>=7", "pytest-timeout>=2.1", "pytest-xdist>=3.0", "box2d>=2.3.10", "minigrid>=3.0", "mpe2>=1.1",
                 "ale-py>=0.10", "matplotlib>=3.5", "minari[hdf5]>=0.5", "imageio>=2.28", "imageio-ffmpeg>=0.4.9",
                 "onnx>=1.16", "onnxscript>=0.2", "onnxruntime>=1.17",
                 "optuna>=3.0", "wandb>=0.20", "mlflow-skinny>=3.0", "sqlalchemy>=2.0", "alembic>=1.10",
                 "gymnasium[mujoco]>=1.0", "gymnasium-robotics>=1.4", "mujoco>=3.1,<3.4",
                 "envpool>=1.2; python_version>='3.11' and sys_platform=='linux'"],
        # baton tune (an Optuna study in SQLite; TPE sampler, median pruner)
        "tune": ["optuna>=3.0"],
        # experiment trackers (log.wandb, log.mlflow; middleware/trackers.py). MLflow's client alone (skinny),
        # with what its default store (SQLite) needs
        "wandb": ["wandb>=0.20"],
        "mlflow": ["mlflow-skinny>=3.0", "sqlalchemy>=2.0", "alembic>=1.10"],
        # baton plot (evaluation curves from progress.csv)
        "plot": ["matplotlib>=3.5"],
        # baton eval --video: mp4 through imageio-ffmpeg (a wheel with its own ffmpeg), GIF through imageio/pillow
        "video": ["imageio>=2.28", "imageio-ffmpeg>=0.4.9"],
        # baton export --format onnx: torch's torch.export-based ONNX exporter needs onnx and onnxscript (running
        # the file needs onnxruntime only, not baton)
        "export": ["onnx>=1.16", "onnxscript>=0.2"],
        # ale-py >= 0.10 ships AtariVectorEnv, which does the whole preprocessing (no opencv needed)
        "atari": ["ale-py>=0.10"],
        # EnvPool's Atari as the atari env type's other backend (env.backend='envpool'); it brings its own ROMs (its
        # wheels: Linux, Python 3.11 and later)
        "envpool": ["envpool>=1.2; python_version>='3.11' and sys_platform=='linux'"],
        # gymnasium[box2d] builds box2d-py from source (needs swig); the `box2d` wheel provides the same
        # Box2D module, and gymnasium's box2d package imports pygame
        "box2d": ["box2d>=2.3.10", "pygame>=2.1"],
        # gymnasium's MuJoCo v5 tasks (dizoo/mujoco): the mujoco wheel, no system MuJoCo needed
        "mujoco": ["gymnasium[mujoco]>=1.0"],
        # gymnasium-robotics' goal-conditioned Fetch tasks (dizoo/robotics; hindsight replay): its 1.4.2 builds no
        # Fetch env on mujoco >= 3.4 (an AssertionError on the joint types), so the extra keeps mujoco below it,
        # and so does the test extra, which trains FetchReach
        "robotics": ["gymnasium-robotics>=1.4", "mujoco>=3.1,<3.4"],
        # MiniGrid (dizoo/minigrid): its image-and-direction dict observations
        "minigrid": ["minigrid>=3.0"],
        # several agents (dizoo/pettingzoo, data.parallel_envs): PettingZoo's parallel API and its MPE tasks
        "pettingzoo": ["pettingzoo>=1.24.3", "mpe2>=1.1"],
        # offline RL: datasets in Minari's format (HDF5 through h5py), read and written from a local root
        "offline": ["minari[hdf5]>=0.5"],
        # bench/peers.py: baton side by side with Stable-Baselines3 (rl-baselines3-zoo's settings) and
        # SB3-contrib (RecurrentPPO)
        "bench": ["stable-baselines3>=2.3", "sb3-contrib>=2.3"],
    },
    entry_points={
        "console_scripts": ["baton=commands.cli:main"],
        "baton.envs": [
            "gym=data.envs",
            "cartpole=dizoo.classic_control.cartpole.envs",
            "cartpole_masked=dizoo.classic_control.cartpole.envs",
            "lunarlander=dizoo.box2d.lunarlander.envs",
            "pendulum=dizoo.classic_control.pendulum.envs",
            "atari=dizoo.atari.envs",
            "hopper=dizoo.mujoco.envs",
            "halfcheetah=dizoo.mujoco.envs",
            "walker2d=dizoo.mujoco.envs",
            "ant=dizoo.mujoco.envs",
            "humanoid=dizoo.mujoco.envs",
            "invertedpendulum=dizoo.mujoco.envs",
            "bit_flipping=dizoo.goal.envs",
            "fetch_reach=dizoo.robotics.envs",
            "minigrid=dizoo.minigrid.envs",
            "taxi=dizoo.toy_text.envs",
            "camera_reach=dizoo.multisensor.envs",
            "mpe=dizoo.pettingzoo.envs",
            "pettingzoo=dizoo.pettingzoo.envs",
        ],
        "baton.config_sections": [
            "log=middleware.logger",
            "ckpt=middleware.checkpoint",
            "preempt=engine.preemption",
            "ddp=middleware.ddp",
            "dataset=data.offline.dataset",
        ],
        "baton.policies": [
            "dqn=policies.dqn",
            "rainbow=policies.rainbow",
            "ppo=policies.ppo",
            "mappo=policies.mappo",
            "ippo=policies.mappo",
            "qmix=policies.qmix",
            "vdn=policies.qmix",
            "iql=policies.qmix",
            "a2c=policies.a2c",
            "ppo_lstm=policies.ppo_lstm",
            "sac=policies.sac",
            "td3=policies.td3",
            "ddpg=policies.td3",
            "bc=policies.bc",
            "cql=policies.cql",
            "td3bc=policies.td3bc",
        ],
    },
)
