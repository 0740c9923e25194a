// What the benches read of a workerd process: which one runs a Worker, its CPU and RSS.

import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/**
 * Every workerd process below process `pid`. (`wrangler dev` runs two: its proxy's and the
 * Worker's, which is why the benches serve Workers with Miniflare, one workerd each.)
 */
export function workerdsOf(pid) {
  let listed;
  try {
    listed = execFileSync("ps", ["-o", "pid=,comm=", "--ppid", String(pid)], { encoding: "utf8" });
  } catch {
    return []; // ps exits 1 when a process has no children
  }
  const children = listed
    .split("\n").map((l) => l.trim().split(/\s+/)).filter(([p]) => p);
  return children.flatMap(([child, comm]) => (comm === "workerd" ? [Number(child)] : workerdsOf(child)));
}

/** CPU time one thread of `pid` has run, in ns (the first field of its scheduler statistics). */
function taskCpuNs(pid, task) {
  return Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "utf8").split(" ")[0]);
}

/** CPU time of every thread of `pid`, in ms. */
export function cpuMs(pid) {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try { ns += taskCpuNs(pid, task); } catch {}
  }
  return ns / 1e6;
}

/** CPU time of `pid`'s main thread alone, in ms: the thread workerd runs its isolates on, without
 * V8's background threads (its optimising compiler, the garbage collector's helpers). */
export function mainThreadCpuMs(pid) {
  return taskCpuNs(pid, pid) / 1e6;
}

export function rssMb(pid) {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
  return Number(line.split(/\s+/)[1]) / 1024;
}

