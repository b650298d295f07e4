#!/usr/bin/env node
'use strict';
// npm's install step. A prebuilt addon for this platform that loads (the
// tarball carries linux-x64 and linux-arm64, glibc) needs nothing more; else
// the addon is built with node-gyp, after checking that the tools it needs
// are there, so a machine without them gets one clear line saying what to
// install instead of a page of compiler noise. (npm 12 does not run install
// scripts unless allowed: the prebuilt addon is then used as it is.)
const { spawnSync } = require('node:child_process');
const { accessSync, constants } = require('node:fs');
const { delimiter, join } = require('node:path');

const root = join(__dirname, '..');

/** Whether node-gyp-build finds an addon here that this Node can load. */
function usableAddon() {
  try {
    const nodeGypBuild = require('node-gyp-build');
    require(nodeGypBuild.resolve(root));
    return true;
  } catch {
    return false;
  }
}

if (usableAddon()) process.exit(0);

function onPath(command) {
  return (process.env.PATH || '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, command), constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

const needed = [
  { what: 'make', found: onPath('make') },
  { what: 'a C++ compiler (g++)', found: ['c++', 'g++', 'clang++'].some(onPath) },
  { what: 'python3', found: onPath('python3') },
];
const missing = needed.filter((tool) => !tool.found).map((tool) => tool.what);
if (missing.length > 0) {
  console.error(
    `flannel-guard: cannot build its native addon: ${missing.join(', ')} not found. ` +
      'Install them (Debian/Ubuntu: apt-get install build-essential python3) and run npm install again.',
  );
  process.exit(1);
}

// npm names its bundled node-gyp in npm_config_node_gyp; a project's own is on PATH.
const nodeGyp = process.env.npm_config_node_gyp;
const [command, args] = nodeGyp
  ? [process.execPath, [nodeGyp, 'rebuild']]
  : ['node-gyp', ['rebuild']];
const result = spawnSync(command, args, { cwd: root, stdio: 'inherit' });
process.exit(result.status === null ? 1 : result.status);
