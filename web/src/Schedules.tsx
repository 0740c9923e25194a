// The conversation's schedules above the composer, read through `GET .../schedules`: refetched
// after every turn (the model may have made one) and cancelled with `DELETE .../schedules/{id}`.
// When the next one comes due the chat is told (`onDue`), so it can follow the turn it starts.

import { useCallback, useEffect, useState } from "react";
import type { Schedule } from "./api";
import { conversationPath, json } from "./api";

const when = (s: Schedule) => {
  const time = (ms: number) => new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  if (s.status === "paused") return `paused after ${s.failures} failures`;
  if (s.status === "done") return `ran ${s.last_run_at ? time(s.last_run_at) : ""}: ${s.last_outcome ?? ""}`;
  if (s.running) return "running now";
  const next = s.next_run_at ? `next ${time(s.next_run_at)}` : "";
  return s.cron ? `${s.cron} (UTC) · ${next}` : next;
};

/** The longest wait `setTimeout` takes (about 24.8 days). */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** `refresh`: changes whenever the schedules may have (a turn ended). `onDue`: the next schedule's
 * time came (its turn is starting, or waits for the running one). */
export function SchedulesList({ conversationId, refresh, onDue }: { conversationId: string; refresh: string; onDue(): void }) {
  const [schedules, setSchedules] = useState<Schedule[]>([]);
  const [problem, setProblem] = useState<string | null>(null);
  const path = `${conversationPath(conversationId)}/schedules`;

  const load = useCallback(async () => {
    const { schedules: list } = await json<{ schedules: Schedule[] }>("GET", path);
    setSchedules(list);
    setProblem(null);
  }, [path]);

  useEffect(() => {
    load().catch((e) => setProblem(e instanceof Error ? e.message : String(e)));
  }, [load, refresh]);

  // Wake when the earliest schedule is due (a little after, so its turn has begun).
  useEffect(() => {
    const next = Math.min(...schedules.filter((s) => s.status === "active" && !s.running && s.next_run_at).map((s) => s.next_run_at!));
    const wait = next - Date.now() + 250;
    if (!Number.isFinite(wait) || wait > MAX_TIMEOUT_MS) return;
    const timer = setTimeout(() => {
      onDue();
      void load().catch(() => {});
    }, Math.max(0, wait));
    return () => clearTimeout(timer);
  }, [schedules, onDue, load]);

  async function cancel(id: string) {
    try {
      await json("DELETE", `${path}/${encodeURIComponent(id)}`);
      await load();
    } catch (e) {
      setProblem(e instanceof Error ? e.message : String(e));
    }
  }

  if (schedules.length === 0 && !problem) return null;
  return (
    <ul className="schedules" data-testid="schedules">
      {problem && <li className="error">{problem}</li>}
      {schedules.map((s) => (
        <li key={s.id} data-testid="schedule" data-status={s.status}>
          <span className="badge">{when(s)}</span>
          <span className="instruction">{s.instruction}</span>
          <button type="button" className="secondary" data-testid="cancel-schedule" onClick={() => void cancel(s.id)}>
            Cancel
          </button>
        </li>
      ))}
    </ul>
  );
}
