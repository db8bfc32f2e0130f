//! Tagged block addresses: one 64-bit address space over every member of an array.
//!
//! As in INSTANT (the thesis's §4.2), the upper 9 bits of a 64-bit block address name
//! the disk and the lower 55 bits a 512-byte sector on it: up to 512 members, each up to
//! 2^55 sectors (16 EiB, far above any csx namespace). csx's file store allocates 4 KiB
//! blocks, so every extent starts on a sector boundary.

use std::fmt;

use crate::error::ArrayError;

/// Bits of the disk tag.
pub const TAG_BITS: u32 = 9;
/// Bits of the sector number.
pub const SECTOR_BITS: u32 = 64 - TAG_BITS;
/// Bytes of a sector.
pub const SECTOR_SIZE: u64 = 512;
/// Members an array may have: every value of the tag.
pub const MEMBERS_MAX: usize = 1 << TAG_BITS;
/// The largest sector number.
pub const SECTOR_MAX: u64 = (1 << SECTOR_BITS) - 1;

/// A tagged block address: member in the upper [`TAG_BITS`], sector below.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct TaggedAddr(pub u64);

impl TaggedAddr {
    /// The address of `sector` on member `member`.
    pub fn new(member: u16, sector: u64) -> Result<TaggedAddr, ArrayError> {
        if usize::from(member) >= MEMBERS_MAX {
            return Err(ArrayError::TagOutOfRange {
                tag: u64::from(member),
                max: MEMBERS_MAX as u64 - 1,
            });
        }
        if sector > SECTOR_MAX {
            return Err(ArrayError::SectorOutOfRange {
                sector,
                max: SECTOR_MAX,
            });
        }
        Ok(TaggedAddr((u64::from(member) << SECTOR_BITS) | sector))
    }

    /// The address of byte `offset` of member `member`'s NVM namespace, which must be on
    /// a sector boundary.
    pub fn from_byte_offset(member: u16, offset: u64) -> Result<TaggedAddr, ArrayError> {
        if !offset.is_multiple_of(SECTOR_SIZE) {
            return Err(ArrayError::Unaligned {
                what: "nvm offset",
                value: offset,
                align: SECTOR_SIZE,
            });
        }
        TaggedAddr::new(member, offset / SECTOR_SIZE)
    }

    /// The member (disk) this address names.
    pub fn member(self) -> u16 {
        (self.0 >> SECTOR_BITS) as u16
    }

    /// The sector on that member.
    pub fn sector(self) -> u64 {
        self.0 & SECTOR_MAX
    }

    /// The byte offset in the member's NVM namespace.
    pub fn byte_offset(self) -> u64 {
        self.sector() * SECTOR_SIZE
    }
}

impl fmt::Display for TaggedAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let a = TaggedAddr::new(5, 1234).unwrap();
        assert_eq!(a.member(), 5);
        assert_eq!(a.sector(), 1234);
        assert_eq!(a.0, (5u64 << 55) | 1234);
        assert_eq!(a.byte_offset(), 1234 * 512);
        let top = TaggedAddr::new(511, SECTOR_MAX).unwrap();
        assert_eq!(top.0, u64::MAX);
        assert_eq!(top.member(), 511);
        assert!(matches!(
            TaggedAddr::new(512, 0),
            Err(ArrayError::TagOutOfRange { tag: 512, max: 511 })
        ));
        assert!(matches!(
            TaggedAddr::new(0, SECTOR_MAX + 1),
            Err(ArrayError::SectorOutOfRange { .. })
        ));
        assert_eq!(
            TaggedAddr::from_byte_offset(1, 8192).unwrap(),
            TaggedAddr::new(1, 16).unwrap()
        );
        assert!(matches!(
            TaggedAddr::from_byte_offset(1, 100),
            Err(ArrayError::Unaligned { value: 100, .. })
        ));
        assert_eq!(
            TaggedAddr::new(1, 0).unwrap().to_string(),
            "0x0080000000000000"
        );
    }
}
