# JupyterHub config for a room of GRPO Lab students on one Linux server (plain JupyterHub; the
# Littlest JupyterHub equivalent is in deploy/README.md as tljh-config commands).
#
#   cd /etc/jupyterhub && export GRPO_LAB_ADMIN=<name>   # the teacher's account name
#   sudo -E /opt/jupyterhub/bin/python /opt/grpo-lab/src/deploy/hub_admin.py -f jupyterhub_config.py
#   sudo -E /opt/jupyterhub/bin/jupyterhub -f jupyterhub_config.py
#
# - The admin: GRPO_LAB_ADMIN, the teacher's account name, is required (no default). The admin
#   holds JupyterHub's admin role (load_roles), not Authenticator.admin_users: NativeAuthenticator
#   approves every name in admin_users the moment someone signs up under it, so with a known name
#   the first visitor to sign up as the admin would become admin of every student's server.
#   deploy/hub_admin.py creates the teacher's account, approved, before the hub first opens;
#   after that a sign-up under the name is refused (taken), and one made before it waits for an
#   approval nobody gives (hub_admin.py replaces it).
# - Authentication: NativeAuthenticator. Students sign up at /hub/signup with a password; nobody
#   can log in until the teacher approves them at /hub/authorize.
# - Isolation and limits: SystemdSpawner runs each student's server as a systemd unit with its own
#   dynamic system user and home (/var/lib/<name>), a memory cap (MemoryMax) and a CPU quota
#   (CPUQuota). JupyterHub's default LocalProcessSpawner cannot enforce either: it only passes
#   MEM_LIMIT / CPU_LIMIT to the server as environment variables, so one student's run could take
#   the whole machine.
# - Threads: torch starts one thread per host core unless told otherwise; under a 1-CPU quota on
#   a 32-core host that is 32 threads fighting over one CPU. LABKIT_THREADS and OMP_NUM_THREADS are
#   set to the per-student CPU limit.
# - Culling: jupyterhub-idle-culler stops servers idle for an hour (their files stay), and each
#   server shuts down kernels idle for 30 minutes whose tab is closed (each holds 0.5-0.9 GiB).
# - Network: the hub listens on 127.0.0.1:8000 only; a TLS reverse proxy (Caddy, nginx) in front
#   of it is the one public listener (deploy/README.md). Hub API, proxy API and the students'
#   servers stay on 127.0.0.1.
#
# Sizes come from deploy/measure_hub.py (deploy/README.md, "How many students per server").
import os
import re
import sys

c = get_config()  # noqa: F821 - provided by JupyterHub's config loader

# the teacher's account name, each class's own; JupyterHub refuses to start without it
ADMIN = os.environ.get("GRPO_LAB_ADMIN", "")
if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", ADMIN):
    raise ValueError(f"GRPO_LAB_ADMIN: expected the teacher's account name (lower-case letters, "
                     f"digits, '.', '_' or '-', up to 64), got {ADMIN!r}; set it in the hub's "
                     "environment (deploy/README.md, 'One server with plain JupyterHub')")
# where the lab is installed (deploy/README.md, "One server"): its venv holds jupyterhub-singleuser
LAB_ENV = "/opt/grpo-lab/env"
CPU_LIMIT = 1  # CPUs per student; the tiny model's runs use one thread well
# per student, measured: server + notebooks 00 and 02 open peak at 1.5 GiB; notebook 09 builds a
# 0.5B-parameter model in float32 (a 2.8 GiB kernel). Past the limit the kernel is killed.
MEM_LIMIT = "4G"
IDLE_SERVER_TIMEOUT_S = 3600
IDLE_KERNEL_TIMEOUT_S = 1800

# -- network: only the reverse proxy in front is public
c.JupyterHub.bind_url = "http://127.0.0.1:8000"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:8081"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:8001"
c.Spawner.ip = "127.0.0.1"

# -- authentication: sign-up, then the teacher's approval
c.JupyterHub.authenticator_class = "nativeauthenticator.NativeAuthenticator"
c.NativeAuthenticator.open_signup = False  # each new account waits for the teacher's approval
c.NativeAuthenticator.minimum_password_length = 10
c.NativeAuthenticator.check_common_password = True
c.NativeAuthenticator.allowed_failed_logins = 5
c.NativeAuthenticator.seconds_before_next_try = 300
# no Authenticator.admin_users (NativeAuthenticator would approve a sign-up under the name): the
# admin role below, and an account deploy/hub_admin.py creates approved
# NativeAuthenticator itself refuses unapproved accounts, so every approved user may log in
c.Authenticator.allow_all = True

# -- each student's server: the lab's environment, limits, their own system user
c.JupyterHub.spawner_class = "systemdspawner.SystemdSpawner"
c.SystemdSpawner.dynamic_users = True  # no Unix accounts to create; homes under /var/lib/<name>
c.SystemdSpawner.isolate_tmp = True
c.SystemdSpawner.isolate_devices = True
c.SystemdSpawner.disable_user_sudo = True
c.Spawner.cmd = [f"{LAB_ENV}/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.cpu_limit = CPU_LIMIT
c.Spawner.mem_limit = MEM_LIMIT
c.Spawner.environment = {
    "LABKIT_THREADS": str(CPU_LIMIT),
    "OMP_NUM_THREADS": str(CPU_LIMIT),
    "MKL_NUM_THREADS": str(CPU_LIMIT),
}
c.Spawner.args = [f"--MappingKernelManager.cull_idle_timeout={IDLE_KERNEL_TIMEOUT_S}",
                  "--MappingKernelManager.cull_interval=300"]
c.Spawner.start_timeout = 120

# -- idle culling: a hub service with only the permissions it needs
c.JupyterHub.services = [{
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                f"--timeout={IDLE_SERVER_TIMEOUT_S}"],
}]
c.JupyterHub.load_roles = [
    {"name": "admin", "users": [ADMIN]},
    {"name": "idle-culler",
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
     "services": ["idle-culler"]},
]
