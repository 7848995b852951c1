/**
 * The shapes of the data the kernel (comm) and the server (REST) send.
 *
 * Kept free of JupyterLab imports: the renderer that uses them is bundled a
 * second time for the anywidget front end, which has no JupyterLab around it.
 */

export type Outcome =
  | 'executed'
  | 'restored'
  | 'resumed'
  | 'incomplete'
  | 'failed'
  | 'uncached';

export interface TimelineEvent {
  seq: number;
  event_id: string;
  checkpoint_id: string | null;
  cell_id: string;
  key: string | null;
  parent: string | null;
  session: string;
  started: number;
  created: string;
  duration: number;
  saved: number;
  bytes: number;
  names: string[];
  outcome: Outcome | string;
  detail: string;
}

export interface Summary {
  checkpoints: number;
  bytes: number;
  events: number;
  executed: number;
  restored: number;
  hit_rate: number;
  time_saved: number;
}

export interface Snapshot {
  store: string;
  exists: boolean;
  events: TimelineEvent[];
  summary: Summary;
  last_seq: number | null;
  /** Checkpoints events name that the store no longer has (gc, deleted, untrusted). */
  unavailable?: string[];
  /**
   * Id → the prefix to show (unique in the store, at least 8 characters): the ids of
   * these events, and every id whose prefix grew past 8. Merged over earlier pages.
   */
  short_ids?: Record<string, string>;
}

export interface NameInfo {
  type?: string;
  shape?: number[] | string;
  dtype?: string;
  bytes?: number;
  stored_as?: string;
  stored_bytes?: number;
  [key: string]: unknown;
}

export interface Details {
  id: string;
  cell_id: string;
  created?: string;
  bytes?: number;
  names: Record<string, NameInfo>;
  key_parts?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface RestoreResult {
  checkpoint_id: string;
  cell_id: string;
  restored: string[];
  removed: string[];
  message: string;
}

/**
 * Where the timeline comes from right now, as the user should read it.
 *
 * - `no-kernel`: no notebook, or a notebook without a kernel.
 * - `not-loaded`: the kernel runs but `%load_ext ipy_resume` has not run.
 * - `connecting`: the comm is being opened.
 * - `live`: the kernel answers; restore is possible.
 * - `busy`: the kernel runs a cell; requests wait behind it.
 * - `offline`: the kernel is restarting or dead; the store on disk is shown read-only.
 */
export type Status = 'no-kernel' | 'not-loaded' | 'connecting' | 'live' | 'busy' | 'offline';

export interface Notice {
  kind: 'info' | 'success' | 'error';
  text: string;
}

export type DetailsState =
  | { state: 'none' }
  | { state: 'loading'; seq: number }
  | { state: 'ready'; seq: number; details: Details }
  | { state: 'error'; seq: number; error: string };

/** Everything the renderer needs to draw one frame. */
export interface ViewState {
  status: Status;
  statusText: string;
  snapshot: Snapshot | null;
  selected: number | null;
  details: DetailsState;
  notice: Notice | null;
  canRestore: boolean;
  canGoToCell: boolean;
  restoring: boolean;
}

/** The event of `seq`: events arrive ordered by seq, so a binary search finds it. */
export function findEvent(snapshot: Snapshot | null, seq: number | null): TimelineEvent | null {
  const events = snapshot?.events ?? [];
  if (seq === null) {
    return null;
  }
  let lo = 0;
  let hi = events.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const at = events[mid].seq;
    if (at === seq) {
      return events[mid];
    }
    if (at < seq) {
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return null;
}

export const EMPTY_SUMMARY: Summary = {
  checkpoints: 0,
  bytes: 0,
  events: 0,
  executed: 0,
  restored: 0,
  hit_rate: 0,
  time_saved: 0
};

/** One `%%checkpoint` run, pushed by a kernel that knows the front end draws badges. */
export interface CellOutcome {
  event: 'outcome';
  /** The notebook cell id (`cellId` of the execute request); null outside a notebook. */
  cell: string | null;
  /** The CELL_ID of `%%checkpoint CELL_ID`. */
  cell_id: string;
  label: string | null;
  outcome: Outcome | string;
  duration: number;
  saved: number;
  checkpoint_id: string | null;
  short_id: string | null;
  names: string[];
  /** Why the cell executed instead of restoring (what `--explain` says). */
  reason: string;
  detail: string;
}

/** One code cell's verdict in a plan for Run All. */
export interface PlannedCell {
  position: number;
  cell: string | null;
  cell_id: string | null;
  label: string;
  verdict: 'restore' | 'execute' | 'unknown' | 'runs' | string;
  reason: string;
  saves: number;
  checkpoint_id: string | null;
  short_id: string | null;
}

export interface RunAllPlan {
  cells: PlannedCell[];
  saved: number;
  text: string;
}

/** What the panel shows of the last plan, or why there is none. */
export type PlanState =
  | { state: 'none' }
  | { state: 'planning' }
  | { state: 'ready'; plan: RunAllPlan }
  | { state: 'error'; error: string };
