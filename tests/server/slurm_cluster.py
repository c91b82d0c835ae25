# SPDX-License-Identifier: Apache-2.0
"""A single-node Slurm cluster for tests: `slurmctld` and `slurmd` from the distribution
(Debian's slurm-wlm), run as root in the foreground with their configuration, state and
logs in a directory of their own, on ports of their own, with no authentication
(`auth/none`, `cred/none`: one host, loopback only). Commands (`sbatch`, `squeue`,
`scancel`) find it through SLURM_CONF in the environment `SlurmCluster.environment()`
gives."""

import os
import pathlib
import shutil
import socket
import subprocess
import time

DAEMONS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def missing():
    """Why no cluster can be started here (None: it can)."""
    absent = [name for name in DAEMONS if not shutil.which(name)]
    if absent:
        return "Slurm is not installed (no %s; Debian: apt-get install slurmctld slurmd slurm-client)" % ", ".join(absent)
    if os.geteuid() != 0:
        return "slurmd runs jobs as their users: the test cluster needs root"
    return None


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for each in sockets:
            each.bind(("127.0.0.1", 0))
        return [each.getsockname()[1] for each in sockets]
    finally:
        for each in sockets:
            each.close()


class SlurmCluster:
    def __init__(self, directory, cpus=None):
        self.directory = pathlib.Path(directory)
        self.cpus = cpus or os.cpu_count() or 1
        self.processes = []
        self.node = socket.gethostname().split(".")[0]

    def environment(self):
        return {**os.environ, "SLURM_CONF": str(self.directory / "slurm.conf")}

    def _configure(self):
        for sub in ("state", "spool", "log"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        controller_port, daemon_port = _free_ports(2)
        d = self.directory
        (d / "slurm.conf").write_text("\n".join([
            "ClusterName=cudaagenttest",
            "SlurmctldHost=%s(127.0.0.1)" % self.node,
            "SlurmctldPort=%d" % controller_port,
            "SlurmdPort=%d" % daemon_port,
            "AuthType=auth/none",
            "CredType=cred/none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SlurmUser=root",
            "SlurmdUser=root",
            "ReturnToService=2",
            # A cancelled job's processes get SIGTERM, and SIGKILL this long after.
            "KillWait=5",
            "StateSaveLocation=%s" % (d / "state"),
            "SlurmdSpoolDir=%s" % (d / "spool"),
            "SlurmctldPidFile=%s" % (d / "slurmctld.pid"),
            "SlurmdPidFile=%s" % (d / "slurmd.pid"),
            "SlurmctldLogFile=%s" % (d / "log" / "slurmctld.log"),
            "SlurmdLogFile=%s" % (d / "log" / "slurmd.log"),
            "NodeName=%s NodeAddr=127.0.0.1 CPUs=%d RealMemory=1000 State=UNKNOWN" % (self.node, self.cpus),
            "PartitionName=test Nodes=%s Default=YES MaxTime=INFINITE State=UP" % self.node,
            ""]))

    def start(self, seconds=60):
        """Starts both daemons and waits until the node takes jobs."""
        self._configure()
        env = self.environment()
        conf = str(self.directory / "slurm.conf")
        log = open(self.directory / "log" / "daemons.out", "a")
        self.processes.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", conf], env=env, stdout=log,
                                               stderr=subprocess.STDOUT))
        self.processes.append(subprocess.Popen(["slurmd", "-D", "-f", conf], env=env, stdout=log,
                                               stderr=subprocess.STDOUT))
        deadline = time.time() + seconds
        while time.time() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError("a Slurm daemon exited with %s:\n%s" % (process.returncode, self.logs()))
            state = subprocess.run(["sinfo", "--noheader", "--format=%t"], env=env, capture_output=True, text=True)
            if state.returncode == 0 and state.stdout.strip() in ("idle", "mix", "alloc"):
                return self
            time.sleep(0.5)
        raise RuntimeError("the Slurm node did not come up within %d s:\n%s" % (seconds, self.logs()))

    def jobs(self):
        """{job id: state} of every job the controller still knows."""
        listed = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i|%T"], env=self.environment(),
                                capture_output=True, text=True)
        return dict(line.split("|", 1) for line in listed.stdout.split() if "|" in line)

    def logs(self, lines=15):
        text = []
        for name in ("slurmctld.log", "slurmd.log", "daemons.out"):
            path = self.directory / "log" / name
            if path.exists():
                text.append("--- %s ---\n%s" % (name, "\n".join(path.read_text(errors="replace").splitlines()[-lines:])))
        return "\n".join(text)

    def stop(self):
        """Cancels every job still there (slurmd leaves running jobs behind when it stops),
        then stops both daemons."""
        if self.processes and self.processes[0].poll() is None:
            subprocess.run(["scancel", "--partition=test"], env=self.environment(), capture_output=True)
            deadline = time.time() + 20
            while time.time() < deadline and any(state in ("RUNNING", "PENDING", "COMPLETING")
                                                 for state in self.jobs().values()):
                time.sleep(0.3)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
