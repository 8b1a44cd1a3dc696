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
                                    "policies", "policies.*", "pipelines", "pipelines.*", "dizoo", "dizoo.*"]),
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
        # the box2d packages, ale-py and mujoco are in the test extra so CI runs the LunarLander, Pong and MuJoCo
        # configs too
        # pytest-xdist: the suite runs on every core (pytest.ini: -n auto, capped in tests/conftest.py)
        "test": ["pytest>=7", "pytest-timeout>=2.1", "pytest-xdist>=3.0", "box2d>=2.3.10", "pygame>=2.1",
                 "ale-py>=0.10", "matplotlib>=3.5", "minari[hdf5]>=0.5", "gymnasium[mujoco]>=1.0"],
        # baton plot (evaluation curves from progress.csv)
        "plot": ["matplotlib>=3.5"],
        # ale-py >= 0.10 ships AtariVectorEnv, which does the whole preprocessing (no opencv needed)
        "atari": ["ale-py>=0.10"],
        # gymnasium[box2d] builds box2d-py from source (needs swig); the `box2d` wheel provides the same
        # Box2D module, and gymnasium's box2d package imports pygame
        "box2d": ["box2d>=2.3.10", "pygame>=2.1"],
        # gymnasium's MuJoCo v5 tasks (dizoo/mujoco): the mujoco wheel, no system MuJoCo needed
        "mujoco": ["gymnasium[mujoco]>=1.0"],
        # offline RL: datasets in Minari's format (HDF5 through h5py), read and written from a local root
        "offline": ["minari[hdf5]>=0.5"],
    },
    entry_points={
        "console_scripts": ["baton=pipelines.cli:main"],
        "baton.envs": [
            "cartpole=dizoo.classic_control.cartpole.envs",
            "lunarlander=dizoo.box2d.lunarlander.envs",
            "pendulum=dizoo.classic_control.pendulum.envs",
            "atari=dizoo.atari.envs",
            "hopper=dizoo.mujoco.envs",
            "halfcheetah=dizoo.mujoco.envs",
            "walker2d=dizoo.mujoco.envs",
            "ant=dizoo.mujoco.envs",
            "humanoid=dizoo.mujoco.envs",
        ],
        "baton.policies": [
            "dqn=policies.dqn",
            "ppo=policies.ppo",
            "a2c=policies.ppo",
            "sac=policies.sac",
            "td3=policies.td3",
            "ddpg=policies.td3",
            "bc=policies.bc",
            "cql=policies.cql",
            "td3bc=policies.td3bc",
        ],
    },
)
