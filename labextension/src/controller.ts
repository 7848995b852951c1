/**
 * What the side panel and the in-notebook widget share: the snapshot on show, the
 * selected event and its details, the restore in flight and the last notice.
 *
 * The host gives it a transport, `request(content)` (protocol.ts), and decides where
 * each request goes: the panel sends to the kernel's comm, or reads details from disk
 * while the kernel is busy or gone; the widget sends anywidget messages to the kernel
 * it lives in. Free of JupyterLab imports, so the widget bundle can carry it.
 */

import { shortId } from './format';
import { Request, TimelineApi } from './protocol';
import { DetailsState, Notice, Snapshot, TimelineEvent, ViewState, findEvent } from './types';

export interface ControllerOptions {
  request: Request;
  /** Runs after every change of what the views draw. */
  changed: () => void;
  /** Whether a restore can be sent now (a kernel with ipy_resume loaded answers). */
  canRestore: () => boolean;
  /** Whether the kernel runs a cell: a restore then waits for it, and says so. */
  isBusy?: () => boolean;
  /** Runs after a restore succeeded, before the restore counts as finished. */
  restored?: () => Promise<void>;
}

/** What only the host knows: where the timeline comes from and what it allows. */
export type HostState = Pick<ViewState, 'status' | 'statusText' | 'canRestore' | 'canGoToCell'>;

/** The fields of a snapshot that a push or a catch-up brings with its events. */
export type SnapshotMeta = Pick<Snapshot, 'summary' | 'last_seq' | 'store' | 'unavailable' | 'short_ids'>;

/**
 * Selection, details and restore over one transport.
 *
 * ```ts
 * const timeline = new TimelineController({ request, changed: redraw, canRestore: () => true });
 * timeline.setSnapshot(snapshot);
 * timeline.select(snapshot.events[0].seq);
 * ```
 */
export class TimelineController {
  private readonly api: TimelineApi;
  private readonly options: ControllerOptions;
  private _snapshot: Snapshot | null = null;
  private selected: number | null = null;
  private details: DetailsState = { state: 'none' };
  private notice: Notice | null = null;
  private restoring = false;

  constructor(options: ControllerOptions) {
    this.options = options;
    this.api = new TimelineApi(options.request);
  }

  get snapshot(): Snapshot | null {
    return this._snapshot;
  }

  /** One frame for the views: this controller's part and the host's. */
  state(host: HostState): ViewState {
    return {
      ...host,
      snapshot: this._snapshot,
      selected: this.selected,
      details: this.details,
      notice: this.notice,
      restoring: this.restoring
    };
  }

  /** Forget the timeline (another notebook); the caller redraws when it is ready. */
  reset(): void {
    this._snapshot = null;
    this.selected = null;
    this.details = { state: 'none' };
    this.notice = null;
  }

  setSnapshot(snapshot: Snapshot | null): void {
    this._snapshot = snapshot;
    this.emit();
  }

  setNotice(notice: Notice | null): void {
    this.notice = notice;
    this.emit();
  }

  /**
   * Append the events newer than the snapshot's last, with what came with them.
   * False when there is no snapshot to add to: the host loads a whole one instead.
   */
  merge(events: TimelineEvent[], meta: SnapshotMeta): boolean {
    const base = this._snapshot;
    if (!base) {
      return false;
    }
    const lastSeq = base.last_seq ?? -1;
    const fresh = events.filter(e => e.seq > lastSeq);
    // A new object so views see the change; the old array is not touched.
    this.setSnapshot({
      store: meta.store ?? base.store,
      exists: true,
      events: fresh.length ? base.events.concat(fresh) : base.events,
      summary: meta.summary ?? base.summary,
      last_seq: Math.max(lastSeq, meta.last_seq ?? -1),
      unavailable: meta.unavailable ?? base.unavailable,
      // a prefix may grow when a later checkpoint shares it: the newest answer wins
      short_ids: { ...(base.short_ids ?? {}), ...(meta.short_ids ?? {}) }
    });
    return true;
  }

  /** Select the event of `seq` (or nothing) and load what its checkpoint stored. */
  select(seq: number | null): void {
    this.selected = seq;
    this.details = { state: 'none' };
    this.emit();
    const event = findEvent(this._snapshot, seq);
    if (!event?.checkpoint_id) {
      return;
    }
    this.details = { state: 'loading', seq: event.seq };
    this.emit();
    this.api.details(event.checkpoint_id).then(
      details => {
        if (this.selected === event.seq) {
          this.details = { state: 'ready', seq: event.seq, details };
          this.emit();
        }
      },
      (err: Error) => {
        if (this.selected === event.seq) {
          this.details = { state: 'error', seq: event.seq, error: err.message };
          this.emit();
        }
      }
    );
  }

  /** Ask the kernel to go back to `event`'s checkpoint; the notice tells how it went. */
  async restore(event: TimelineEvent): Promise<void> {
    if (!event.checkpoint_id || !this.options.canRestore()) {
      this.setNotice({ kind: 'error', text: 'Restoring needs a live kernel with ipy_resume loaded.' });
      return;
    }
    this.restoring = true;
    const wait = this.options.isBusy?.() ? ' (after the running cell finishes)' : '';
    const id = shortId(event.checkpoint_id, this._snapshot?.short_ids);
    this.notice = { kind: 'info', text: `Restoring the kernel to ${id} (${event.cell_id})${wait}…` };
    this.emit();
    try {
      const result = await this.api.restore(event.checkpoint_id);
      this.notice = { kind: 'success', text: result.message };
      await this.options.restored?.();
    } catch (err) {
      this.notice = { kind: 'error', text: `Restore failed: ${(err as Error).message}` };
    } finally {
      this.restoring = false;
      this.emit();
    }
  }

  private emit(): void {
    this.options.changed();
  }
}
