"""The switch: TNA programs, BFRuntime client, controller and the software-switch emulator."""
