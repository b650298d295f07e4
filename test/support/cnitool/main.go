// fg-cnitool: a real CNI runtime for the tests, libcni's own list operations
// (AddNetworkList, CheckNetworkList, DelNetworkList) as containerd and CRI-O
// call them: the plugins of a conflist in order (DEL in reverse, stopping at
// the first failure), prevResult injected, results cached.
//
//	fg-cnitool ADD|CHECK|DEL CONFLIST CONTAINER_ID NETNS IFNAME CACHE_DIR
//
// CNI_PATH names the plugin folders. Prints the ADD result as JSON; on a
// failure prints the plugin's error and exits 1.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func main() {
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
