"""baton check-ddp: the data-parallel update against the one-process update, and what it reports."""
from __future__ import annotations

import os

import pytest
import torch

from commands.check_ddp import compare_ranks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DQN_DDP = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_dqn_ddp_config.py")


PPO_DDP = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config", "cartpole_ppo_ddp_config.py")
TD3_DDP = os.path.join(ROOT, "dizoo", "classic_control", "pendulum", "config", "pendulum_td3_config.py")
PPO_LSTM_DDP = os.path.join(ROOT, "dizoo", "classic_control", "cartpole", "config",
                            "cartpole_masked_ppo_lstm_ddp_config.py")
MAPPO = os.path.join(ROOT, "dizoo", "pettingzoo", "config", "simple_spread_mappo_config.py")
VDN = os.path.join(ROOT, "dizoo", "pettingzoo", "config", "simple_spread_vdn_config.py")


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("config,overrides", [(DQN_DDP, []), (PPO_DDP, []),
                                              (TD3_DDP, ["policy.learn.actor_update_freq=1"]),
                                              (PPO_LSTM_DDP, ["policy.model.hidden_size=16"]),
                                              (MAPPO, ["policy.value_norm=true"]), ("qmix", [])],
                         ids=["dqn", "ppo", "td3", "ppo_lstm", "mappo", "qmix"])
def test_check_ddp_passes(config, overrides, tmp_path, tmp_path_factory, monkeypatch, capsys):
    """PPO too: its advantages are normalised over every rank's minibatch (9e-4 off when each rank used its
    own statistics). TD3 too: its target smoothing noise is drawn for the global batch, each rank taking its
    rows; the check's one update is an actor step (delay 1), so the actor is compared as well. Recurrent PPO
    too: each rank's whole sequences, unrolled from their stored memories, joined along the sequence axis.
    MAPPO too: advantages normalised over every agent of every rank's rows (counted per agent, 1.4e-3 off
    when counted per row). QMIX too (the VDN config with QMIX's type): its mixer is inside the model's one forward,
    so DDP averages its gradients."""
    from commands.cli import main

    if config in (MAPPO, "qmix"):
        pytest.importorskip("mpe2")
    if config == "qmix":
        config = str(tmp_path_factory.mktemp("config") / "simple_spread_qmix_config.py")
        with open(config, "w") as f:
            f.write("from dizoo.pettingzoo.config.simple_spread_vdn_config import main_config, create_config\n"
                    "create_config.policy.type = 'qmix'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BATON_DDP_TIMEOUT", "60")
    assert main(["check-ddp", "-c", config, "--nproc", "2", *overrides]) == 0
    assert "OK: the data-parallel update equals the one-process update" in capsys.readouterr().out
    assert os.listdir(tmp_path) == []  # it writes nothing where it runs


def _record(w, unused=(), bn=0.0):
    return {"after": {"w": w, "bn.running_mean": torch.tensor([bn])}, "buffers": {"bn.running_mean": torch.tensor([bn])},
            "unused": list(unused), "batch": {"obs": torch.zeros(4, 1)}}


def test_report_names_unsynchronised_unused_and_buffers():
    reference = {"w": torch.tensor([1.0, 2.0]), "bn.running_mean": torch.tensor([0.0])}
    good = compare_ranks([_record(torch.tensor([1.0, 2.0])), _record(torch.tensor([1.0, 2.0]))], reference)
    assert good["ok"] and good["max_difference"] == 0.0 and "OK:" in str(good)
    bad = compare_ranks([_record(torch.tensor([1.0, 2.0])), _record(torch.tensor([1.0, 2.5]), unused=["head.bias"],
                                                                     bn=0.3)], reference)
    assert not bad["ok"]
    assert bad["differ_across_ranks"] == ["w"] and bad["unused"] == ["head.bias"]
    assert bad["buffers_differ"] == ["bn.running_mean"]
    text = str(bad)
    assert "not synchronised): w" in text and "head.bias" in text and "NOT EQUAL" in text
    off = compare_ranks([_record(torch.tensor([1.0, 2.1]))] * 2, reference)
    assert not off["ok"] and off["worst_parameter"] == "w" and abs(off["max_difference"] - 0.1) < 1e-6


def test_check_ddp_needs_two_processes(capsys):
    from commands.cli import main
    with pytest.raises(SystemExit):
        main(["check-ddp", "-c", DQN_DDP, "--nproc", "1"])
    assert "compares at least 2 processes" in capsys.readouterr().err


@pytest.mark.distributed
@pytest.mark.timeout(240)
@pytest.mark.parametrize("overrides,exact", [
    (["ddp.static_graph=true", "ddp.gradient_as_bucket_view=true", "ddp.bucket_cap_mb=1", "ddp.comm_hook=powersgd"],
     True),   # PowerSGD compresses from its third update: the check's one update is a plain all-reduce
    # the gradients summed in fp16: close, not equal. The squared error keeps them large enough for fp16: the
    # config's Huber loss makes gradients so small that fp16 loses them, and Adam's first step (the learning rate
    # times the gradient's sign) then moves such a weight by 0.003 in one process and not in the other
    (["ddp.comm_hook=fp16", "policy.learn.td_loss=mse"], False),
], ids=["knobs", "fp16"])
def test_check_ddp_takes_the_communication_keys(overrides, exact, tmp_path, monkeypatch, capsys):
    from commands.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BATON_DDP_TIMEOUT", "60")
    rc = main(["check-ddp", "-c", DQN_DDP, "--nproc", "2", *overrides])
    out = capsys.readouterr().out
    difference = float(out.split("largest parameter difference: ")[1].split()[0])
    assert (rc == 0) == exact and difference < (1e-5 if exact else 1e-3), out


def test_a_compression_hook_the_backend_cannot_run_is_refused_before_training(capsys):
    from engine.distributed import DistributedError, check_comm_hook
    from commands.cli import main

    with pytest.raises(DistributedError, match="needs the nccl backend on CUDA.*Use 'fp16' or 'powersgd' on gloo"):
        check_comm_hook("bf16", "gloo")
    check_comm_hook("bf16", "nccl")
    check_comm_hook("fp16", "gloo")
    assert main(["check-ddp", "-c", DQN_DDP, "ddp.comm_hook=bf16"]) == 2
    err = capsys.readouterr().err
    assert err.count("baton:") == 1 and "check-ddp runs on gloo: ddp.comm_hook='bf16' needs the nccl" in err
    assert main(["check-ddp", "-c", DQN_DDP, "ddp.comm_hook=fp61"]) == 2
    assert "did you mean 'fp16'" in capsys.readouterr().err


def test_report_says_when_noisy_layers_were_compared_without_noise():
    """Each rank draws its own noise by design (policies/noisy.py): the check compares with it off, and says so."""
    reference = {"w": torch.tensor([1.0]), "bn.running_mean": torch.tensor([0.0])}
    records = [dict(_record(torch.tensor([1.0])), noise_off=True) for _ in range(2)]
    report = compare_ranks(records, reference)
    assert report["ok"] and report["noise_off"]
    assert "noisy layers: compared with their noise off" in str(report)
    assert "noisy layers" not in str(compare_ranks([_record(torch.tensor([1.0]))] * 2, reference))


@pytest.mark.distributed
@pytest.mark.timeout(180)
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_check_ddp_passes_on_dict_observations_with_masks(algo, tmp_path, monkeypatch, capsys):
    """Issue 31: Taxi-v4's observation is a dict (its state and its info mask): the ranks' batches hold trees,
    recorded as plain dicts (the check reads them back with weights_only), and the update equals the
    one-process update, masked target (DQN) and masked distribution (PPO) included."""
    from commands.cli import main

    config = tmp_path / "taxi_config.py"
    config.write_text(
        "main_config = dict(exp_name='taxi', env=dict(env_id='Taxi-v4', collector_env_num=4, evaluator_env_num=2,\n"
        "                   n_evaluator_episode=2), policy=dict(collect=dict(n_sample=64)))\n"
        f"create_config = dict(env=dict(type='gym'), policy=dict(type={algo!r}))\n")
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.chdir(run)
    monkeypatch.setenv("BATON_DDP_TIMEOUT", "60")
    assert main(["check-ddp", "-c", str(config), "--nproc", "2"]) == 0
    assert "OK: the data-parallel update equals the one-process update" in capsys.readouterr().out
