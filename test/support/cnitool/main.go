// fg-cnitool: a real CNI runtime for the tests, libcni's own list operations
// (AddNetworkList, CheckNetworkList, DelNetworkList) as containerd and CRI-O
// call them: the plugins of a conflist in order (DEL in reverse, stopping at
// the first failure), prevResult injected, results cached.
//
//	fg-cnitool ADD|CHECK|DEL CONFLIST CONTAINER_ID NETNS IFNAME CACHE_DIR
//	fg-cnitool STATUS|GC CONFLIST
//
// CNI_PATH names the plugin folders. Prints the ADD result as JSON; on a
// failure prints the plugin's error and exits 1. Debian's libcni (1.1.2)
// predates STATUS and GC (spec 1.1.0): they are run as libcni 1.2's
// GetStatusNetworkList and GCNetworkList run them, through its own invoke
// package: each plugin of the list in order, found in CNI_PATH, its
// configuration with the list's name and cniVersion injected (GC's also
// with the valid attachments: none), stopping at the first error.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// statusOrGC runs STATUS or GC on each plugin of the list, as libcni 1.2 does.
func statusOrGC(command string, list *libcni.NetworkConfigList) error {
	paths := filepath.SplitList(os.Getenv("CNI_PATH"))
	for _, plugin := range list.Plugins {
		values := map[string]interface{}{"name": list.Name, "cniVersion": list.CNIVersion}
		if command == "GC" {
			values["cni.dev/valid-attachments"] = []interface{}{}
		}
		conf, err := libcni.InjectConf(plugin, values)
		if err != nil {
			return err
		}
		path, err := invoke.FindInPath(plugin.Network.Type, paths)
		if err != nil {
			return err
		}
		args := &invoke.Args{Command: command, Path: os.Getenv("CNI_PATH")}
		if err := invoke.ExecPluginWithoutResult(context.Background(), path, conf.Bytes, args, nil); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	if len(os.Args) == 3 && (os.Args[1] == "STATUS" || os.Args[1] == "GC") {
		list, err := libcni.ConfListFromFile(os.Args[2])
		if err != nil {
			fail(err)
		}
		if err := statusOrGC(os.Args[1], list); err != nil {
			fail(err)
		}
		return
	}
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: fg-cnitool ADD|CHECK|DEL CONFLIST CONTAINER_ID NETNS IFNAME CACHE_DIR")
		os.Exit(2)
	}
	command, file, containerID, netns, ifname, cacheDir := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5], os.Args[6]
	list, err := libcni.ConfListFromFile(file)
	if err != nil {
		fail(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir(filepath.SplitList(os.Getenv("CNI_PATH")), cacheDir, nil)
	runtime := &libcni.RuntimeConf{ContainerID: containerID, NetNS: netns, IfName: ifname}
	ctx := context.Background()
	switch command {
	case "ADD":
		result, err := cni.AddNetworkList(ctx, list, runtime)
		if err != nil {
			fail(err)
		}
		out, err := json.Marshal(result)
		if err != nil {
			fail(err)
		}
		fmt.Println(string(out))
	case "CHECK":
		if err := cni.CheckNetworkList(ctx, list, runtime); err != nil {
			fail(err)
		}
	case "DEL":
		if err := cni.DelNetworkList(ctx, list, runtime); err != nil {
			fail(err)
		}
	default:
		fail(fmt.Errorf("unknown command %q", command))
	}
}
