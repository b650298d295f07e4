{
  # Compiled for size (-Os), but for what runs once per notification and per entry written:
  # parsing and request building, at node-gyp's -O3 (docs/packaging.md).
  "target_defaults": {
    "include_dirs": ["native"],
    "defines": [
      "NAPI_VERSION=8",
      "NAPI_CPP_EXCEPTIONS",
      "NODE_ADDON_API_DISABLE_DEPRECATED",
      "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"
    ],
    "cflags!": ["-fno-exceptions"],
    "cflags": ["-fvisibility=hidden", "-ffunction-sections", "-fdata-sections"],
    "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
    "cflags_cc": [
      "-isystem",
      "<!(node -p \"require('path').resolve(require('node-addon-api').include_dir)\")",
      "-std=c++17",
      "-fexceptions",
      "-Wall",
      "-Wextra",
      "-Wshadow",
      "-Werror"
    ]
  },
  "targets": [
    {
      "target_name": "flannel_guard_hot_path",
      "type": "static_library",
      "sources": [
        "native/netlink_parser.cc",
        "native/netlink_builder.cc",
        "native/neighbour_batch.cc",
        "native/restore_set.cc"
      ]
    },
    {
      "target_name": "flannel_guard",
      "dependencies": ["flannel_guard_hot_path"],
      "sources": [
        "native/errno_name.cc",
        "native/netlink_socket.cc",
        "native/correction_allowance.cc",
        "native/state_mirror.cc",
        "native/sysfs.cc",
        "native/monitor_core.cc",
        "native/monitor_io.cc",
        "native/scripted_io.cc",
        "native/read_thread.cc",
        "native/report_queue.cc",
        "native/delivered_view.cc",
        "native/socket_filter.cc",
        "native/ethtool.cc",
        "native/path_probe.cc",
        "native/checksum_sample.cc",
        "native/name_claim.cc",
        "native/snmp_counters.cc",
        "native/addon/addon.cc",
        "native/addon/claim_watch_wrap.cc",
        "native/addon/control_wrap.cc",
        "native/addon/convert.cc",
        "native/addon/errors.cc",
        "native/addon/items.cc",
        "native/addon/monitor_args.cc",
        "native/addon/monitor_wrap.cc",
        "native/addon/probe_wrap.cc",
        "native/addon/scripted_monitor_wrap.cc"
      ],
      "ldflags": ["-Wl,--gc-sections"],
      "configurations": {
        "Release": {
          "cflags!": ["-O3"],
          "cflags": ["-Os"]
        }
      }
    }
  ]
}
