//! Comparison operators of the filter functions (`csx_filter_u32`, `csx_filter_u64`,
//! argument `op`): element `x` matches when `x OP operand`, compared unsigned.

pub const CSX_CMP_EQ: u64 = 0;
pub const CSX_CMP_NE: u64 = 1;
pub const CSX_CMP_LT: u64 = 2;
pub const CSX_CMP_LE: u64 = 3;
pub const CSX_CMP_GT: u64 = 4;
pub const CSX_CMP_GE: u64 = 5;

/// Every operator in value order: its C name, value and meaning (for the header).
pub const ALL: &[(&str, u64, &str)] = &[
    ("CSX_CMP_EQ", CSX_CMP_EQ, "x == operand"),
    ("CSX_CMP_NE", CSX_CMP_NE, "x != operand"),
    ("CSX_CMP_LT", CSX_CMP_LT, "x < operand"),
    ("CSX_CMP_LE", CSX_CMP_LE, "x <= operand"),
    ("CSX_CMP_GT", CSX_CMP_GT, "x > operand"),
    ("CSX_CMP_GE", CSX_CMP_GE, "x >= operand"),
];

/// The largest valid operator; anything above is `CSX_EINVAL`.
pub const CSX_CMP_LAST: u64 = CSX_CMP_GE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_are_dense_in_value_order() {
        for (i, (_, value, _)) in ALL.iter().enumerate() {
            assert_eq!(*value, i as u64);
        }
        assert_eq!(ALL.len() as u64, CSX_CMP_LAST + 1);
    }
}
