"""What must not leave the machine: a tracker URI's credentials (in config.json, the log, the
trackers' params and config), and a checkout's secrets and stores in a submitted job's upload."""

import zipfile


def test_a_submitted_job_uploads_neither_tracker_stores_nor_tune_results_nor_secrets(tmp_path):
    """The upload Ray builds from dsac-submit's runtime env (Ray's own packaging code, on a
    checkout-like directory): the code goes, the stores and secrets stay."""
    from ray._private.runtime_env.packaging import _zip_files

    from dsac.submit import runtime_env

    checkout = tmp_path / "checkout"
    kept = ["launch.py", "requirements.txt", "dsac/__init__.py", "dsac/envs.py", "docs/guide.md", "my_envs.py"]
    left_out = ["mlflow.db", "mlruns/0/meta.yaml", "mlartifacts/1/a/weights.pkl", "wandb/offline-run-1/run.wandb",
                "tune_results/dsac_tune/experiment_state.json", ".env", ".env.local", "cluster.pem", "tls/server.key",
                ".netrc", "runs/sac-Pendulum/config.json", "sub/.env"]
    for name in kept + left_out:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("x")
    package = tmp_path / "package.zip"
    _zip_files(str(checkout), runtime_env(install=False, stop_grace_s=60)["excludes"], str(package),
               include_gitignore=True)
    uploaded = {name for name in zipfile.ZipFile(package).namelist() if not name.endswith("/")}
    assert not uploaded & set(left_out), sorted(uploaded & set(left_out))
    assert set(kept) <= uploaded, sorted(uploaded)
