/** Small formatters shared by every view. */

export function formatBytes(bytes: number): string {
  if (!bytes) {
    return '0 B';
  }
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${value >= 100 || unit === 0 ? value.toFixed(0) : value.toFixed(1)} ${units[unit]}`;
}

export function formatDuration(seconds: number): string {
  if (!seconds || seconds < 0) {
    return '0 s';
  }
  if (seconds < 1) {
    return `${Math.round(seconds * 1000)} ms`;
  }
  if (seconds < 60) {
    return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
  }
  if (seconds < 3600) {
    return `${(seconds / 60).toFixed(1)} min`;
  }
  return `${(seconds / 3600).toFixed(1)} h`;
}

function pad(n: number): string {
  return n < 10 ? `0${n}` : `${n}`;
}

/** Clock time of a unix timestamp, in the browser's time zone. */
export function formatClock(started: number): string {
  const d = new Date(started * 1000);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function formatDay(started: number): string {
  const d = new Date(started * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
}

export function formatPercent(ratio: number): string {
  return `${Math.round((ratio || 0) * 100)}%`;
}

/**
 * The prefix of a checkpoint id to show, as the kernel computed it: the shortest one of
 * at least 8 characters that no other id of the store shares (`short_ids` of a snapshot).
 * Never sliced here: only the kernel knows which prefixes are unique; the full id is
 * shown when the kernel has not sent one.
 */
export function shortId(
  id: string | null | undefined,
  shortIds?: Record<string, string> | null
): string {
  if (!id) {
    return '—';
  }
  return shortIds?.[id] ?? id;
}

export function formatShape(shape: unknown): string {
  if (Array.isArray(shape)) {
    return `(${shape.join(', ')}${shape.length === 1 ? ',' : ''})`;
  }
  return shape === undefined || shape === null ? '' : String(shape);
}
