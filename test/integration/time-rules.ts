/**
 * The rules the event-time tests run: `every` alerts on each `pay` event it judges (a late event
 * is judged by no rule, so a missing alert is a late or lost event), and `burst` holds every
 * `pay` event in a 10 s window that never fires, so partitions have buffered events and state
 * that wait for event time (and so get ticks when idle).
 */
export const TIME_RULES = [
  {
    id: 'every',
    on: ['pay'],
    when: { all: [{ fact: 'type', operator: 'equal', value: 'pay' }] },
    alert: { severity: 'low', title: 'pay {{id}}' },
  },
  {
    id: 'burst',
    on: ['pay'],
    pattern: { kind: 'threshold', aggregate: 'count', window: '10s', operator: '>=', value: 1000 },
  },
];
