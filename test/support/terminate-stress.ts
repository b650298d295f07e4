/**
 * Run as a child process: `node terminate-stress.js MODE NETNS ROUNDS`.
 * Terminates worker threads at the worst moments - while their monitor is
 * delivering a burst of events (MODE=events), or while one-shot calls run on
 * the thread pool (MODE=oneshot) - and prints `survived N rounds`. A broken
 * addon aborts the whole process (exit 134) instead.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';

const [mode, netns, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText);
const lib = join(__dirname, '..', '..', 'lib', 'index.js');

const workerCode: Record<string, string> = {
  // Posting from inside the listener: termination lands while a batch is being delivered.
  events: `
    const { parentPort } = require('node:worker_threads');
    require(${JSON.stringify(lib)}).LinkMonitor.open({ netns: ${JSON.stringify(netns)} }).then((monitor) => {
      monitor.on('linkAdded', (event) => parentPort.postMessage('seen ' + event.link.name));
      parentPort.postMessage('ready');
    });`,
  oneshot: `
    const { parentPort } = require('node:worker_threads');
    const { getLinks } = require(${JSON.stringify(lib)});
    parentPort.postMessage('ready');
    (async () => { for (let i = 0; i < 1e6; i += 1) await getLinks({ netns: ${JSON.stringify(netns)} }); })();`,
};

function addLinks(round: number): Promise<void> {
  const lines = Array.from({ length: 20 }, (_, i) => `link add ifs${round}x${i} type ifb`);
  return new Promise((resolve) => {
    const child = execFile('ip', ['-n', netns ?? '', '-batch', '-'], () => {
      resolve();
    });
    child.stdin?.end(`${lines.join('\n')}\n`);
  });
}

async function main(): Promise<void> {
  const code = mode === undefined ? undefined : workerCode[mode];
  if (code === undefined || netns === undefined || !Number.isInteger(rounds)) {
    throw new Error('usage: terminate-stress.js events|oneshot NETNS ROUNDS');
  }
  for (let round = 0; round < rounds; round += 1) {
    const worker = new Worker(code, { eval: true });
    await new Promise((resolve) => worker.once('message', resolve));
    const adding = mode === 'events' ? addLinks(round) : Promise.resolve();
    if (mode === 'events') await new Promise((resolve) => worker.once('message', resolve));
    else await new Promise((resolve) => setTimeout(resolve, 2 + (round % 5)));
    await worker.terminate();
    await adding;
  }
  console.log(`survived ${rounds} rounds`);
}

void main();
