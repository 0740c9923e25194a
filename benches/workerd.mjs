// What the benches read of a workerd process: which one runs a `wrangler dev`, its CPU and RSS.

import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** The workerd process under `wrangler dev` process `pid`. */
export function workerdOf(pid) {
  const children = execFileSync("ps", ["-o", "pid=,comm=", "--ppid", String(pid)], { encoding: "utf8" })
    .split("\n").map((l) => l.trim().split(/\s+/)).filter(([p]) => p);
  const found = children.find(([, c]) => c === "workerd");
  if (found) return Number(found[0]);
  for (const [child] of children) {
    const deeper = workerdOf(child);
    if (deeper) return deeper;
  }
  return undefined;
}

/** CPU time of every thread of `pid`, in ms. */
export function cpuMs(pid) {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try { ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "utf8").split(" ")[0]); } catch {}
  }
  return ns / 1e6;
}

export function rssMb(pid) {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
  return Number(line.split(/\s+/)[1]) / 1024;
}

