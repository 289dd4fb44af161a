#!/bin/bash
#
# rxe_qp_state.sh [SECS]: what soft-RoCE (rdma_rxe) itself holds of each RC
# QP that does work within SECS seconds (default 3): its requester's and
# completer's state (PSNs, the flags it waits on, read credits, packets
# in flight, the retransmit timer, the tasks' states), the send queue's
# indices, and the work requests at the send queue's head, at the
# requester's position and before it. Run in a guest of the soft-RoCE
# bed, as root; it changes nothing (kprobe events and a trace instance of
# its own, removed at the end).
#
# rxe has no debug interface that shows this: `rdma res show qp` gives the
# next PSN to send only. The kprobe events read the QP (the first argument
# of the functions below, %di on x86_64) at offsets taken from the kernel's
# own type information (/sys/kernel/btf, through pahole), so nothing here is
# tied to one kernel build. One line per QP and trigger; fields:
#   qpn    QP number
#   rst    requester state (0 reset, 1 init, 2 ready, 3 drain, 4 drained,
#          5 error); cst the completer's
#   rpsn   next PSN the requester sends; cpsn next PSN the completer expects
#          acknowledged (rpsn == cpsn: nothing in flight)
#   widx   SQ index the requester works on; cons/prod the SQ's consumer
#          (completer) and producer (application) indices
#   rd     read/atomic credits left (of maxrd); nrd: waits for one
#   wfence waits for a fence; wpsn waits for acknowledgements (at most
#          128 PSNs unacknowledged); nskb waits for packets in flight
#          (skbout) to drop below 16; nretry/wrnr: a retry is due / waits
#          for the RNR timer
#   cto/ctr/csr/cretry completer: timeout fired / this run is a timeout
#          retry / a retry started / retries left
#   rtask/ctask tasks' states (0 idle, 1 busy, 2 armed)
#   tpend  retransmit timer pending (non-zero), texp its expiry, tjif the
#          QP's timeout in jiffies (0: none)
# and for the work requests ("head" at cons, "req" at widx, "prev" at
# widx - 1: the one a requester in the error state, rst=5, failed on):
# wr_id (UCT's send counter + 1), opcode (0 write, 2 send, 4 read, 5/6
# atomics), flags (1 fence, 2 signaled, 4 solicited, 8 inline), status
# (the completion status: 0 success, 2 local QP operation error, 4 local
# protection error, 5 flushed), state (0 posted, 1 processing, 2 pending,
# 3 done, 4 error), mask, first/last PSN, has_rd_atomic, length, resid,
# the number of SGEs and the first SGE's address, length and lkey.
#
set -u
secs=${1:-3}
T=/sys/kernel/tracing
btfb=${RXE_BTF_BASE:-/sys/kernel/btf/vmlinux}
btfm=${RXE_BTF_MODULE:-/sys/kernel/btf/rdma_rxe}

die() { echo "rxe_qp_state: $*"; exit 1; }
[ -e "$T/kprobe_events" ] || mount -t tracefs nodev "$T" 2>/dev/null ||
    die "no tracefs"
[ -e "$T/kprobe_events" ] || die "no kprobe events"
# a trace instance of our own: the global buffer, and whoever traces into
# it, are left alone (the kprobe events themselves are global)
I=$T/instances/mrfo_rxe_state
mkdir -p "$I" 2>/dev/null || die "cannot make the trace instance $I"
[ -r "$btfm" ] || die "rdma_rxe is not loaded (no $btfm)"
command -v pahole >/dev/null || die "no pahole (dwarves)"

# the structures, once (pahole reads the kernel's BTF in ~1 s under TCG)
types=$(pahole -F btf --btf_base "$btfb" "$btfm" \
            -C rxe_qp,ib_qp,ib_device,ib_qp_attr,rxe_sq,rxe_queue,rxe_queue_buf,rxe_req_info,rxe_comp_info,rxe_task,timer_list,hlist_node,rxe_send_wqe,rxe_send_wr,rxe_dma_info,rxe_sge \
            2>/dev/null) || die "pahole failed"

# every STRUCT.FIELD below (direct members) as a shell variable
# o_STRUCT_FIELD holding its byte offset, in one pass (forks are slow in a
# TCG guest)
want="rxe_qp.ibqp rxe_qp.attr rxe_qp.sq rxe_qp.req rxe_qp.comp
      rxe_qp.retrans_timer rxe_qp.skb_out rxe_qp.need_req_skb
      rxe_qp.qp_timeout_jiffies ib_qp.qp_num ib_qp.device ib_device.name
      ib_qp_attr.max_rd_atomic rxe_sq.queue rxe_queue.buf
      rxe_queue.index_mask rxe_queue.log2_elem_size
      rxe_queue_buf.producer_index rxe_queue_buf.consumer_index
      rxe_queue_buf.data rxe_task.state timer_list.entry timer_list.expires
      hlist_node.pprev rxe_send_wqe.wr rxe_send_wqe.status
      rxe_send_wqe.state rxe_send_wqe.mask rxe_send_wqe.first_psn
      rxe_send_wqe.last_psn rxe_send_wqe.has_rd_atomic rxe_send_wqe.dma
      rxe_send_wr.opcode rxe_send_wr.send_flags rxe_dma_info.length
      rxe_dma_info.resid rxe_dma_info.num_sge rxe_sge.addr rxe_sge.length
      rxe_sge.lkey"
for f in state wqe_index psn opcode rd_atomic wait_fence need_rd_atomic \
         wait_psn need_retry wait_for_rnr_timer task; do
    want+=" rxe_req_info.$f"
done
for f in state psn timeout timeout_retry started_retry retry_cnt task; do
    want+=" rxe_comp_info.$f"
done
offsets=$(awk -v want="$want" '
    BEGIN { n = split(want, w, /[ \n\t]+/)
            for (i = 1; i <= n; i++) if (w[i] != "") need[w[i]] = 1 }
    /^struct [a-z_0-9]+ \{/ { s = $2; next }
    /^\};/ { s = ""; next }
    s != "" && /^\t[^\t]/ && match($0, /\/\* *[0-9]+/) {
        o = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", o)
        line = $0; sub(/\/\*.*/, "", line); sub(/\[.*/, "", line)
        sub(/[ \t;]+$/, "", line); m = split(line, t, /[ \t*]+/)
        k = s "." t[m]
        if (k in need) { print "o_" s "_" t[m] "=" o; delete need[k] }
    }
    END { for (k in need) { print "missing " k > "/dev/stderr"; bad = 1 }
          exit bad }' <<<"$types") || die "a field is missing in rxe's types"
eval "$offsets"
# the SGE array of a work request: a flexible array in an anonymous union,
# one level deeper than the members read above
o_rxe_dma_info_sge=$(awk '/^struct rxe_dma_info \{/ { s = 1; next }
    s && /^\};/ { exit }
    s && /sge\[0\];/ && match($0, /\/\* *[0-9]+/) {
        o = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", o); print o; exit }' \
    <<<"$types")
[ -n "$o_rxe_dma_info_sge" ] || die "no offset of rxe_dma_info.sge"

sqq=$(( o_rxe_qp_sq + o_rxe_sq_queue ))
req=$o_rxe_qp_req
comp=$o_rxe_qp_comp
# r/c/q NAME FIELD TYPE: add a fetch of the requester's, completer's or
# QP's FIELD to args (no command substitution: forks are slow under TCG)
r() { local v=o_rxe_req_info_$2; args+=" $1=+$(( req + ${!v} ))(%di):$3"; }
c() { local v=o_rxe_comp_info_$2; args+=" $1=+$(( comp + ${!v} ))(%di):$3"; }
q() { local v=o_rxe_qp_$2; args+=" $1=+${!v}(%di):$3"; }
qbuf="+$o_rxe_queue_buf(+$sqq(%di))"
timer=$o_rxe_qp_retrans_timer

args="qp=%di:x64"
args+=" dev=+$o_ib_device_name(+$(( o_rxe_qp_ibqp + o_ib_qp_device ))(%di)):string"
args+=" qpn=+$(( o_rxe_qp_ibqp + o_ib_qp_qp_num ))(%di):u32"
r rst state u32; r rpsn psn u32; c cst state u32; c cpsn psn u32
r widx wqe_index s32
args+=" cons=+$o_rxe_queue_buf_consumer_index($qbuf):u32"
args+=" prod=+$o_rxe_queue_buf_producer_index($qbuf):u32"
args+=" mask=+$o_rxe_queue_index_mask(+$sqq(%di)):u32"
args+=" log2=+$o_rxe_queue_log2_elem_size(+$sqq(%di)):u32"
args+=" buf=$qbuf:x64"
r rd rd_atomic s32
args+=" maxrd=+$(( o_rxe_qp_attr + o_ib_qp_attr_max_rd_atomic ))(%di):u8"
r nrd need_rd_atomic s32; r wfence wait_fence s32; r wpsn wait_psn s32
q nskb need_req_skb s32; q skbout skb_out s32; r nretry need_retry s32
r wrnr wait_for_rnr_timer s32; r ropc opcode s32
c cto timeout s32; c ctr timeout_retry s32; c csr started_retry s32
c cretry retry_cnt u32
args+=" rtask=+$(( req + o_rxe_req_info_task + o_rxe_task_state ))(%di):s32"
args+=" ctask=+$(( comp + o_rxe_comp_info_task + o_rxe_task_state ))(%di):s32"
args+=" tpend=+$(( timer + o_timer_list_entry + o_hlist_node_pprev ))(%di):x64"
args+=" texp=+$(( timer + o_timer_list_expires ))(%di):u64"
q tjif qp_timeout_jiffies u64

fns="rxe_resp_queue_pkt rxe_comp_queue_pkt rxe_requester rxe_completer"

cleanup() {
    echo 0 2>/dev/null >"$I/events/mrfo_rxe/enable"
    local e
    for e in $(awk -F'[:/ ]' '$2 == "mrfo_rxe" {print $3}' \
                   "$T/kprobe_events" 2>/dev/null); do
        echo "-:mrfo_rxe/$e" >>"$T/kprobe_events"
    done
}
finish() {
    cleanup
    rmdir "$I" 2>/dev/null
}
trap finish EXIT
cleanup

i=0
for fn in $fns; do
    echo "p:mrfo_rxe/qp$i $fn $args" >>"$T/kprobe_events" ||
        die "cannot add a kprobe event on $fn"
    i=$((i + 1))
done

# a round of tracing: the last line of each QP and function
trace_round() {
    echo 0 >"$I/tracing_on"
    : >"$I/trace"
    echo 1 >"$I/events/mrfo_rxe/enable"
    echo 1 >"$I/tracing_on"
    sleep "$1"
    echo 0 >"$I/tracing_on"
    echo 0 >"$I/events/mrfo_rxe/enable"
    awk 'match($0, / qp[0-9]+: /) {
             ev = substr($0, RSTART + 1, RLENGTH - 3)
             if (!match($0, / qp=0x[0-9a-f]+/)) next
             q = substr($0, RSTART + 4, RLENGTH - 4)
             last[q " " ev] = $0
         }
         END { for (k in last) print last[k] }' "$I/trace" | sort
}

lines=$(trace_round "$secs")
if [ -z "$lines" ]; then
    echo "rxe_qp_state: no QP did any work in ${secs} s"
    exit 0
fi
echo "--- rxe QP state (kprobes on: $fns; per QP the last call of each)"
sed -E 's/^.* (qp[0-9]+): \(([a-z_]+)[^)]*\)/\2/' <<<"$lines"

# the work requests at the head and at the requester's position, of each QP
# seen (absolute addresses in the QP's send queue ring)
wr=$o_rxe_send_wqe_wr
wdma=$o_rxe_send_wqe_dma
wfields="wrid=$wr:u64 opc=$(( wr + o_rxe_send_wr_opcode )):u32"
wfields+=" flags=$(( wr + o_rxe_send_wr_send_flags )):u32"
for f in status state mask first_psn last_psn has_rd_atomic; do
    v=o_rxe_send_wqe_$f
    wfields+=" $f=${!v}:u32"
done
wfields+=" len=$(( wdma + o_rxe_dma_info_length )):u32"
wfields+=" resid=$(( wdma + o_rxe_dma_info_resid )):u32"
wfields+=" nsge=$(( wdma + o_rxe_dma_info_num_sge )):u32"
wsge=$(( wdma + o_rxe_dma_info_sge ))
wfields+=" sge_addr=$(( wsge + o_rxe_sge_addr )):x64"
wfields+=" sge_len=$(( wsge + o_rxe_sge_length )):u32"
wfields+=" sge_lkey=$(( wsge + o_rxe_sge_lkey )):x32"

# get VAR NAME LINE: VAR = the value of NAME= in LINE
get() { local x=" $3"; x=${x#* $2=}; printf -v "$1" %s "${x%% *}"; }
seen=" "
i=0
while read -r l; do
    get qp qp "$l"
    case "$seen" in *" $qp "*) continue ;; esac
    seen+="$qp "
    get b buf "$l"; get m mask "$l"; get lg log2 "$l"
    get cons cons "$l"; get widx widx "$l"
    [ -n "$b" ] && [ -n "$m" ] && [ -n "$lg" ] || continue
    a="qp=%di:x64"
    for which in head req prev; do
        case $which in
            head) ix=$cons ;;
            req)  ix=$widx ;;
            prev) ix=$((widx - 1)) ;;
        esac
        base=$(( b + o_rxe_queue_buf_data + ((ix & m) << lg) ))
        for fv in $wfields; do
            name=${fv%%=*}; rest=${fv#*=}; o=${rest%%:*}; t=${rest#*:}
            printf -v addr '0x%x' $(( base + o ))
            a+=" ${which}_$name=@$addr:$t"
        done
    done
    # any call with the QP as its first argument fetches them; the
    # filter keeps that QP's
    for fn in rxe_resp_queue_pkt rxe_completer; do
        echo "p:mrfo_rxe/wq$i $fn $a" >>"$T/kprobe_events" &&
            echo "qp == $qp" >"$I/events/mrfo_rxe/wq$i/filter" ||
            echo "rxe_qp_state: no event for the entries of QP $qp"
        i=$((i + 1))
    done
done <<<"$lines"

wl=$(echo 0 >"$I/tracing_on"; : >"$I/trace"
     for e in "$I"/events/mrfo_rxe/wq*; do echo 1 >"$e/enable"; done
     echo 1 >"$I/tracing_on"
     sleep "$secs"; echo 0 >"$I/tracing_on"
     echo 0 >"$I/events/mrfo_rxe/enable"
     awk 'match($0, / wq[0-9]+: /) && match($0, / qp=0x[0-9a-f]+/) {
              last[substr($0, RSTART + 4, RLENGTH - 4)] = $0 }
          END { for (k in last) print last[k] }' "$I/trace" | sort)
echo "--- send queue entries (head_* at the consumer index, req_* at the"
echo "    requester's, prev_* before it; of the QPs above that did work again"
echo "    in ${secs} s)"
sed -E 's/^.* wq[0-9]+: \([^)]*\) //' <<<"$wl"
