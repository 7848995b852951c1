/**
 * The anywidget front end of `ipy_resume.timeline()`.
 *
 * esbuild bundles this file with the same renderer the side panel uses into
 * `ipy_resume/_frontend/widget.js`. The widget lives inside the kernel, so it
 * is always "live": the Python side syncs the snapshot as a trait and answers
 * `details` / `restore` requests sent as custom messages.
 */

import { shortId } from './format';
import { TimelineRenderer } from './renderer';
import { DetailsState, Notice, Snapshot, ViewState } from './types';

interface AnyModel {
  get(name: string): any;
  on(event: string, callback: (...args: any[]) => void): void;
  off(event?: string | null, callback?: ((...args: any[]) => void) | null): void;
  send(content: unknown): void;
}

interface RenderProps {
  model: AnyModel;
  el: HTMLElement;
}

function render({ model, el }: RenderProps): () => void {
  let nextId = 1;
  const waiting = new Map<number, (reply: any) => void>();
  let selected: number | null = null;
  let details: DetailsState = { state: 'none' };
  let notice: Notice | null = null;
  let restoring = false;

  const request = (content: Record<string, unknown>): Promise<any> => {
    const id = nextId++;
    return new Promise(resolve => {
      waiting.set(id, resolve);
      model.send({ ...content, id });
    });
  };

  const state = (): ViewState => ({
    status: 'live',
    statusText: 'Live: this widget runs in the kernel.',
    snapshot: (model.get('snapshot') as Snapshot) ?? null,
    selected,
    details,
    notice,
    canRestore: true,
    canGoToCell: false,
    restoring
  });

  const host = document.createElement('div');
  host.className = 'ipr-widget';
  el.append(host);
  const redraw = () => view.update(state());
  const view: TimelineRenderer = new TimelineRenderer(host, {
    select: seq => {
      selected = seq;
      const event = state().snapshot?.events.find(e => e.seq === seq);
      details = event?.checkpoint_id ? { state: 'loading', seq: event.seq } : { state: 'none' };
      redraw();
      if (!event?.checkpoint_id) {
        return;
      }
      void request({ request: 'details', target: event.checkpoint_id }).then(reply => {
        if (selected !== event.seq) {
          return;
        }
        details =
          typeof reply.error === 'string'
            ? { state: 'error', seq: event.seq, error: reply.error }
            : { state: 'ready', seq: event.seq, details: reply.data };
        redraw();
      });
    },
    restore: event => {
      if (!event.checkpoint_id) {
        return;
      }
      restoring = true;
      notice = { kind: 'info', text: `Restoring the kernel to ${shortId(event.checkpoint_id, state().snapshot?.short_ids)}…` };
      redraw();
      void request({ request: 'restore', target: event.checkpoint_id }).then(reply => {
        restoring = false;
        notice =
          typeof reply.error === 'string'
            ? { kind: 'error', text: `Restore failed: ${reply.error}` }
            : { kind: 'success', text: reply.data.message };
        redraw();
      });
    },
    goToCell: () => undefined,
    refresh: () => void request({ request: 'refresh' })
  }, { maxListHeight: 320 });

  const onMessage = (msg: any) => {
    const resolve = msg && typeof msg.id === 'number' ? waiting.get(msg.id) : undefined;
    if (resolve) {
      waiting.delete(msg.id);
      resolve(msg);
    }
  };
  model.on('msg:custom', onMessage);
  model.on('change:snapshot', redraw);
  redraw();
  return () => {
    model.off('msg:custom', onMessage);
    model.off('change:snapshot', redraw);
    view.dispose();
  };
}

export default { render };
