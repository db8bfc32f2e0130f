//! Bulk data that the shm and tcp transports move beside the encoded command or
//! completion instead of inside it: a Memory or File Write's bytes, a read's reply.
//!
//! A command whose bulk data is taken out is still a valid command (an empty write), so
//! its encoding is the ordinary wire encoding; the receiving side puts the bytes back
//! (or hands them to the device out of band) before the device runs it.

use csx_proto::{Completion, Op, Reply};

/// Takes the bytes of a Memory Write or File Write out of `op` (`None` for other ops
/// and empty writes). A Load Program chunk keeps its bytes: an empty chunk is not a
/// valid command, and chunks are small.
pub fn take_command_data(op: &mut Op) -> Option<Vec<u8>> {
    match op {
        Op::MemWrite { data, .. } | Op::FileWrite { data, .. } if !data.is_empty() => {
            Some(std::mem::take(data))
        }
        _ => None,
    }
}

/// Puts bytes taken by [`take_command_data`] back; `false` if `op` takes none or already
/// holds some.
pub fn put_command_data(op: &mut Op, bytes: Vec<u8>) -> bool {
    match op {
        Op::MemWrite { data, .. } | Op::FileWrite { data, .. } if data.is_empty() => {
            *data = bytes;
            true
        }
        _ => false,
    }
}

/// The most reply bytes the completion of `op` may carry as data (a read's length).
pub fn reply_data_max(op: &Op) -> usize {
    match op {
        // Both are at most 16 MiB (checked by `Op::validate` before submission).
        Op::MemRead { len, .. } | Op::FileRead { len, .. } => *len as usize,
        _ => 0,
    }
}

/// Takes a read's reply bytes out of `c` (`None` when it has none).
pub fn take_reply_data(c: &mut Completion) -> Option<Vec<u8>> {
    match &mut c.reply {
        Reply::Data(d) if !d.is_empty() => Some(std::mem::take(d)),
        _ => None,
    }
}

/// Puts reply bytes back; `false` if the completion has no empty data reply to fill.
pub fn put_reply_data(c: &mut Completion, bytes: Vec<u8>) -> bool {
    match &mut c.reply {
        Reply::Data(d) if d.is_empty() => {
            *d = bytes;
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use csx_proto::{CommandId, MemHandle, Status};

    use super::*;

    #[test]
    fn data_comes_out_and_goes_back() {
        let mut op = Op::MemWrite {
            handle: MemHandle(1),
            offset: 0,
            data: vec![1, 2, 3],
        };
        let data = take_command_data(&mut op).expect("a write has data");
        assert!(op.validate().is_ok(), "an empty write is a valid command");
        assert!(put_command_data(&mut op, data));
        assert_eq!(op.data_len(), 3);
        assert!(!put_command_data(&mut op, vec![4]), "already full");
        let mut flush = Op::Flush;
        assert!(take_command_data(&mut flush).is_none());
        assert!(!put_command_data(&mut flush, vec![1]));

        let mut c = Completion::new(CommandId(1), Status::Success);
        c.reply = Reply::Data(vec![9; 10]);
        let bytes = take_reply_data(&mut c).expect("data");
        assert_eq!(c.reply, Reply::Data(vec![]));
        assert!(put_reply_data(&mut c, bytes));
        assert_eq!(c.reply, Reply::Data(vec![9; 10]));
    }
}
