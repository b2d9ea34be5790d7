"""The switch: TNA programs, BFRuntime client, controller and the software-switch emulator."""

import os

# gRPC's fork handlers run in every child a process forks once gRPC has started, and
# can break it before it execs: ansible-runner's pexpect child (the tofino_sde role
# started by `rainmaker run` after a BFRuntime status read) then died with "epoll_wait
# error: Bad file descriptor". Nothing here uses gRPC in a forked child; the setting
# must be made before grpc is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
