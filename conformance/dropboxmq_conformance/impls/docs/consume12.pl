#!/usr/bin/perl
# A DropboxMQ 1.2-style consumer in Perl, written from spec/PROTOCOL.md ("what 1.2 does").
#   consume12.pl ROOT QUEUE CLIENT_ID            consume until target/ has nothing to claim
#   consume12.pl --recover ROOT QUEUE CLIENT_ID  return CLIENT_ID's claims to target/ (R-1)
# Claim: rename target/NAME -> processing/<enc(clientId)>~NAME, the name unchanged (as 1.2).
# Acknowledge: rename to processed/<enc(clientId)>~NAME with JMSXDeliveryCountI=<n> in the
# properties field, n = the count NAME carried + 1 (N-7; 1.2 writes it at acknowledgement).
# Recovery writes JMSXDeliveryCountI=<deliveries so far> (R-2).  Order: N-6; expired -> expired/.
use strict;
use warnings;

my $recover = @ARGV && $ARGV[0] eq '--recover' ? shift @ARGV : 0;
my ($root, $queue, $cid) = @ARGV;
die "usage: $0 [--recover] ROOT QUEUE CLIENT_ID\n" unless defined $cid;
my $box = "$root/$queue/incoming";
$| = 1;

sub enc {    # N-2: URL form encoding of the UTF-8 bytes, '.' as %2E
    my $s = shift;
    $s =~ s/([^A-Za-z0-9\-*_ ])/sprintf("%%%02X", ord($1))/ge;
    $s =~ tr/ /+/;
    return $s;
}

sub fields { my @f = split /\./, $_[0], -1; return @f }

sub count_of {    # N-7: the n of JMSXDeliveryCount<type>=<n>, 0 when none
    my @f = fields(shift);
    return 0 unless @f == 8;
    for my $pair (split /&/, $f[7]) {
        return $1 + 0 if $pair =~ /^JMSXDeliveryCount[YHIL]=\+?(\d{1,9})$/;
    }
    return 0;
}

sub with_count {    # the name with JMSXDeliveryCountI=<n> as its only count
    my ($name, $n) = @_;
    my @f = fields($name);
    return $name if @f < 3 || @f > 8;
    push @f, '' while @f < 8;
    my @props = grep { $_ ne '' && !/^JMSXDeliveryCount.=/ } split /&/, $f[7];
    $f[7] = join '&', @props, "JMSXDeliveryCountI=$n";
    return join '.', @f;
}

sub key_of {    # N-6: [-priority, kind, numeric prefix, name]
    my $name = shift;
    my @f = fields($name);
    if (@f >= 3 && @f <= 8 && $f[1] ne '' && $f[0] =~ /^[+-]?\d{1,12}$/
        && $f[0] >= -2147483648 && $f[0] <= 2147483647) {
        return [-$f[0], 0, $1, $name] if $f[1] =~ /^(\d{1,30})-\d{1,30}$/;
        return [-$f[0], 1, 0, $name];
    }
    return [-4, 2, 0, $name];
}

sub numcmp { my ($x, $y) = @_; $x =~ s/^0+(?=.)//; $y =~ s/^0+(?=.)//; length($x) <=> length($y) || $x cmp $y }

sub by_key { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] || numcmp($a->[2], $b->[2]) || $a->[3] cmp $b->[3] }

my $prefix = enc($cid) . '~';
if ($recover) {
    opendir(my $d, "$box/processing") or die "$box/processing: $!";
    for my $p (grep { index($_, $prefix) == 0 } readdir $d) {
        my $name = substr($p, length $prefix);
        # the claim kept the name: this delivery was number count+1, so that many so far
        rename "$box/processing/$p", "$box/target/" . with_count($name, count_of($name) + 1);
    }
    exit 0;
}

while (1) {
    opendir(my $d, "$box/target") or die "$box/target: $!";
    my @names = map { $_->[3] } sort by_key map { key_of($_) } grep { $_ ne '.' && $_ ne '..' } readdir $d;
    closedir $d;
    my $took = 0;
    for my $name (@names) {
        my $f = "$box/target/$name";
        next if -l $f || !-f _;
        my @fl = fields($name);
        if (@fl >= 4 && $fl[3] =~ /^\d+$/ && $fl[3] != 0 && $fl[3] <= int(time * 1000)) {
            rename $f, "$box/expired/$name";
            next;
        }
        my $claimed = "$box/processing/$prefix$name";
        next unless rename $f, $claimed;    # ENOENT: another consumer won (C-2)
        if (open(my $fh, '<', $claimed)) { local $/; my $body = <$fh>; close $fh }
        print "$name\n";
        rename $claimed, "$box/processed/$prefix" . with_count($name, count_of($name) + 1)
            or die "ack $claimed: $!";
        $took = 1;
        last;    # list again: a late higher-priority message goes first (C-9)
    }
    last unless $took;
}
