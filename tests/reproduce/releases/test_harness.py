"""tfdp.reproduce.releases.harness: a TF1-style script (written for this test, in a throwaway
git repository) run through the shim on a temporary copy, with its overrides' diff, curve and
seed in the result file; the checkout checks stop a wrong commit or an edited release."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from tfdp.reproduce.releases import harness, jobs

# A TF1 graph-mode script: placeholders, a session, the removed tutorial reader, and
# module-level constants for its length, as the releases have.
_TOY_SCRIPT = '''\
import tensorflow as tf
from tensorflow.examples.tutorials.mnist import input_data

STEPS = 400
EVAL_EVERY = 100


def main(_):
    data = input_data.read_data_sets("MNIST_data/", one_hot=True, validation_size=500)
    x = tf.placeholder(tf.float32, [None, 784])
    y_ = tf.placeholder(tf.float32, [None, 10])
    w = tf.Variable(tf.truncated_normal([784, 10], stddev=0.01))
    b = tf.Variable(tf.zeros([10]))
    logits = tf.matmul(x, w) + b
    loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits_v2(labels=y_, logits=logits))
    train = tf.train.GradientDescentOptimizer(0.5).minimize(loss)
    hits = tf.equal(tf.argmax(logits, 1), tf.argmax(y_, 1))
    accuracy = tf.reduce_mean(tf.cast(hits, tf.float32))
    sess = tf.InteractiveSession()
    sess.run(tf.global_variables_initializer())
    test = {x: data.test.images, y_: data.test.labels}
    for i in range(STEPS):
        if i % EVAL_EVERY == 0:
            print("step \\t %d \\t test accuracy \\t %g" % (i, accuracy.eval(feed_dict=test)))
        bx, by = data.train.next_batch(50)
        train.run(feed_dict={x: bx, y_: by})
    print("test accuracy %g" % accuracy.eval(feed_dict=test))


if __name__ == "__main__":
    tf.app.run()
'''


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c",
                           "user.email=t@example.com", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture(name="toy")
def _toy(tmp_path):
    """A git checkout holding the toy release, and a job for it at its commit."""
    repo = tmp_path / "release"
    (repo / "Toy").mkdir(parents=True)
    (repo / "Toy" / "toy.py").write_text(_TOY_SCRIPT)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "toy")
    job = jobs.ReleaseJob(
        name="toy.mnist", repo="example/toy", commit=_git(repo, "rev-parse", "HEAD"),
        folder="Toy", script="toy.py", settings={"steps": "400", "every": "100"},
        overrides=(jobs.Override("toy.py", "STEPS = 400", "STEPS = {steps}"),
                   jobs.Override("toy.py", "EVAL_EVERY = 100", "EVAL_EVERY = {every}")),
        data_dir="", curve_pattern=jobs.get("adlm.mnist").curve_pattern,
        final_pattern=jobs.get("adlm.mnist").final_pattern,
        extra_metrics={"curve_again": jobs.get("adlm.mnist").curve_pattern})
    return repo, job


def test_a_tf1_script_runs_on_a_copy_with_its_overrides_recorded(toy, tmp_path, monkeypatch):
    repo, job = toy
    monkeypatch.setenv("TFDP_RELEASE_MNIST", "sample")  # the embedded subset: no files needed
    before = (repo / "Toy" / "toy.py").read_bytes()
    out = tmp_path / "out" / "toy.json"
    result = harness.run_job(job, str(repo), seed=3, output=str(out),
                             settings={"steps": "60", "every": "20"},
                             work_dir=str(tmp_path / "work"), command="tfdp-release ...")
    assert (repo / "Toy" / "toy.py").read_bytes() == before  # the checkout is never edited
    assert json.loads(out.read_text()) == result
    assert result["release"]["commit"] == job.commit and result["seed"] == 3
    assert result["settings"] == {"steps": "60", "every": "20"}
    # The diff is exact and holds the changed lines only.
    assert result["diff"].splitlines() == [
        "--- a/Toy/toy.py", "+++ b/Toy/toy.py", "@@ -4,2 +4,2 @@", "-STEPS = 400",
        "-EVAL_EVERY = 100", "+STEPS = 60", "+EVAL_EVERY = 20"]
    assert [step for step, _ in result["curve"]] == [0, 20, 40]
    # Logistic regression on the embedded MNIST sample: from chance at step 0 to well above
    # it after 60 steps of 50 at rate 0.5 (typically about 85% on its 1,000 test images).
    assert result["curve"][0][1] < 30.0
    assert result["numbers"]["test_accuracy"] > 60.0 and result["numbers"]["final_line"]
    assert result["seconds"] > 0 and result["exit_code"] == 0
    # An extra metric gives its own curve, and its last point is its number.
    assert result["extra_curves"] == {"curve_again": result["curve"]}
    assert result["numbers"]["curve_again"] == result["curve"][-1][1]


def test_the_checkout_must_be_at_the_jobs_commit_and_unedited(toy, tmp_path):
    repo, job = toy
    other = dataclasses.replace(job, commit="0" * 40)
    with pytest.raises(ValueError, match="release_dir .* is at commit"):
        harness.run_job(other, str(repo), 1, str(tmp_path / "x.json"))
    (repo / "Toy" / "toy.py").write_text(_TOY_SCRIPT.replace("0.5", "0.1"))
    with pytest.raises(ValueError, match="local changes"):
        harness.run_job(job, str(repo), 1, str(tmp_path / "x.json"))
    assert not (tmp_path / "x.json").exists()


def test_a_fragment_that_is_not_there_exactly_once_is_an_error(toy, tmp_path):
    repo, job = toy
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "toy.py").write_text(_TOY_SCRIPT.replace("STEPS = 400", "STEPS = 401"))
    with pytest.raises(ValueError, match="expected once"):
        harness.apply_overrides(job, str(copy), job.settings)
    with pytest.raises(ValueError, match="settings: job toy.mnist has no setting"):
        harness.run_job(job, str(repo), 1, str(tmp_path / "x.json"), settings={"lr": "1"})
    with pytest.raises(ValueError, match="seed must be"):
        harness.run_job(job, str(repo), -1, str(tmp_path / "x.json"))


def test_parse_output_reads_the_curve_and_the_final_line():
    job = jobs.get("adlm.mnist")
    text = "noise\nstep \t 0 \t test accuracy \t 0.1\nstep \t 33 \t test accuracy \t 0.5\n" \
           "test accuracy 0.625\n12.5\n"
    curve, final = harness.parse_output(job, text)
    assert curve == [[0, 10.0], [33, 50.0]] and final == 62.5
    sto = jobs.get("stobatch.mnist")
    curve, final = harness.parse_output(
        sto, "step: 20.0\t epsilon: 0.2\t benign: 0.4100 \t -1 \t 0 \t 0 \t\n")
    assert curve == [[20, 41.0]] and final is None
    extra = harness.parse_extra_metrics(
        sto, "step: 20\t noise_free: 0.5\nstep: 20.0\t epsilon: 0.2\t benign: 0.41\n"
             "step: 40\t noise_free: 0.625\n")
    assert extra == {"noise_free_accuracy": [[20, 50.0], [40, 62.5]]}
    assert harness.parse_extra_metrics(job, "step: 20\t noise_free: 0.55\n") == {}


def test_every_job_names_a_full_commit_and_overrides_with_known_settings():
    for job in jobs.all_jobs().values():
        assert len(job.commit) == 40 and int(job.commit, 16) >= 0
        for ov in job.overrides:
            ov.new.format(**job.settings)  # every placeholder has a default


def test_unknown_job_is_an_error_naming_the_known_ones():
    with pytest.raises(ValueError, match="job must be one of"):
        jobs.get("gpm.mnist")
