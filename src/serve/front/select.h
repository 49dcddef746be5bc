/* select.h — choosing among the samples of one prompt (repeated sampling, docs/
 * repeated-sampling.md). Two ways:
 *   majority: each finished sample's answer is extracted (the first capture group of a regex,
 *     or by default the last number in the text) and counted; the winner is the answer with
 *     the most votes, ties going to the answer first given by the lowest sample index. The
 *     vote is settled as soon as no outcome of the samples still running could change the
 *     winner, so the rest can be cancelled.
 *   logprob: samples ranked by mean token log-probability (best_of and select = "logprob").
 * A client's regex can backtrack exponentially over a long answer, so every match runs under
 * PCRE2 match, depth and heap limits (JIT-compiled where PCRE2 can): one past them is an
 * error of the vote (dy_vote_error), never an unbounded computation. The caller runs matches
 * outside any lock other threads wait on.
 * Pure: no I/O, no threads; the caller feeds finished samples in. */
#ifndef DYAD_SELECT_H
#define DYAD_SELECT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct dy_vote dy_vote;

/* A vote over n_samples samples. answer_regex NULL: the last number in the text. NULL with
 * err set if the regex does not compile or memory is short. */
dy_vote *dy_vote_new(const char *answer_regex, int n_samples, char *err, size_t errlen);
void dy_vote_free(dy_vote *v);

/* Sample i ended with this text (counted once; later calls for i are ignored). A match that
 * runs past its limits leaves the sample abstaining and sets dy_vote_error. */
void dy_vote_add(dy_vote *v, int sample, const char *text, size_t len);
/* NULL, or why the vote cannot be trusted: a sample's answer could not be extracted within
 * the match limits (its answer is unknown, so the request fails rather than guess). */
const char *dy_vote_error(const dy_vote *v);
/* Sample i ended without text worth counting (cancelled, failed): it no longer votes. */
void dy_vote_abstain(dy_vote *v, int sample);
/* True when every sample has voted or abstained, or when the leading answer's lead exceeds
 * the votes still outstanding. */
bool dy_vote_settled(const dy_vote *v);
/* The sample to return: the lowest-index sample that gave the winning answer; 0 when no
 * sample gave any answer. */
int dy_vote_chosen(const dy_vote *v);
/* The winning answer, or NULL. */
const char *dy_vote_winner(const dy_vote *v);
/* The answer sample i gave, or NULL (none found, or not counted yet). */
const char *dy_vote_answer(const dy_vote *v, int sample);
/* {"winner": "42" | null, "settled_early": bool,
 *  "votes": {"42": {"count": 3, "samples": [0, 2, 3]}, ...}} — a new reference; NULL if
 * out of memory (never an object with parts missing). */
json_t *dy_vote_json(const dy_vote *v);

/* Mean token log-probability of a sample (-INFINITY for a sample without tokens). */
double dy_mean_logprob(const float *logprobs, int n);
/* The k best of n samples by score, best first (ties: lower index first), into out[k]. */
void dy_select_best(const double *score, int n, int k, int *out);

#endif
