"""gymnasium's Taxi (env type ``taxi``, ``Taxi-v4``): the task whose legal-action mask baton's masks were built
for.

A taxi on a 5x5 grid picks up a passenger at one of four stands and drops them at another: six actions (four
moves, pick up, drop off), -1 a step, +20 for the drop-off, -10 for a pick-up or drop-off where there is none.
The observation is one of 500 states (a ``Discrete``: baton gives it an embedding, ``policies.encoders``), and
every step's ``info["action_mask"]`` says which actions change the state: moves into a wall, and pick-ups and
drop-offs that are not allowed, are masked (``data.action_masks`` moves the mask into the observation with no
configuration; ``env.action_mask_key=''`` trains without it). An episode is cut at 200 steps.

Stop value 8, gymnasium's ``reward_threshold`` for Taxi. The best return of an episode is below 20 (the +20 of
the drop-off, less at least one step).
"""
from __future__ import annotations

from data.envs import GymEnvType
from engine.registry import ENV_REGISTRY

__all__ = ["TAXI"]

TAXI = ENV_REGISTRY.register("taxi", GymEnvType("Taxi-v4", stop_value=8.0, best_return=20.0))
